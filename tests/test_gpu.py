"""GPU-only checks (marked `gpu`, skipped without CUDA): catalog families and baselines on real shapes."""

import pytest

from ksearch.eval.parent.evaluator import EvalSettings, Evaluator
from ksearch.task import list_tasks, load_task
from ksearch.task.catalog import load_catalog

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("task_name", list_tasks())
def test_families_pass_feedback_workloads_on_gpu(task_name):
    task = load_task(task_name)
    cat = load_catalog(task.strategies_dir, task.name)
    workloads = task.workload_set("feedback")
    with Evaluator(task, EvalSettings(device="cuda", timeout_s=600, warmup=2)) as ev:
        baseline = ev.measure_baselines(workloads)
        assert not baseline.failures, baseline.failures
        for fam in cat.families:
            report = ev.evaluate(cat.render(fam.name, {}), fam.name, workloads, baseline)
            assert report.passed, (fam.name, report.summary(), report.log[-2000:])
