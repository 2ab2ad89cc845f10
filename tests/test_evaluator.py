"""The evaluator end to end on the CPU: worker process, correctness, timeouts, crashes, scoring."""

import pytest

from ksearch.eval.evaluator import EvalSettings, Evaluator
from ksearch.task import load_task

TASK = "gqa_paged_decode_h32_kv4_d128_ps1"

CORRECT = '''
import torch
from ksearch.task import load_task
_ref = load_task("gqa_paged_decode_h32_kv4_d128_ps1").reference

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    return _ref(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)
'''

ONE_WRONG = CORRECT.replace("    return _ref(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)",
                            "    out, lse = _ref(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)\n"
                            "    out[0, 3, 7] += 1.0\n    return out, lse")
WRONG_DTYPE = CORRECT.replace("    return _ref(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)",
                              "    out, lse = _ref(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)\n"
                              "    return out.float(), lse")
HANGS = "import time\ndef run(*args):\n    while True:\n        time.sleep(0.1)\n"
CRASHES = "import os\ndef run(*args):\n    os._exit(3)\n"
RAISES = "def run(*args):\n    raise ValueError('bad launch config')\n"
BROKEN = "def run(*args):\n    return (\n"


@pytest.fixture(scope="module")
def evaluator():
    task = load_task(TASK)
    ev = Evaluator(task, EvalSettings(device="cpu", timeout_s=20, warmup=0, iterations=1))
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def workloads():
    return load_task(TASK).workload_set("tiny")[:2]


@pytest.fixture(scope="module")
def baseline(evaluator, workloads):
    return evaluator.measure_baselines(workloads)


def test_baseline_on_cpu_is_the_reference(baseline, workloads):
    assert baseline.label == "PyTorch reference (CPU)"
    assert set(baseline.best()) == {w.name for w in workloads}


def test_correct_solution_passes_and_gets_a_score(evaluator, workloads, baseline):
    r = evaluator.evaluate(CORRECT, "ok", workloads, baseline)
    assert r.passed, r.log
    assert r.score is not None and r.score > 0 and r.baseline == "PyTorch reference (CPU)"
    assert all(w.latency_ms and w.latency_ms > 0 for w in r.workloads)


@pytest.mark.parametrize("source,status", [
    (ONE_WRONG, "INCORRECT_NUMERICAL"), (WRONG_DTYPE, "INCORRECT_DTYPE"),
    (RAISES, "RUNTIME_ERROR"), (BROKEN, "COMPILE_ERROR"),
])
def test_failures_are_classified(evaluator, workloads, baseline, source, status):
    r = evaluator.evaluate(source, "bad", workloads, baseline)
    assert r.status == status and r.score is None


def test_wrong_on_one_element_names_it(evaluator, workloads, baseline):
    r = evaluator.evaluate(ONE_WRONG, "bad", workloads, baseline)
    assert "1 of" in r.first_failure().message and "(0, 3, 7)" in r.first_failure().message


def test_hang_times_out_and_the_next_candidate_still_runs(workloads, baseline):
    task = load_task(TASK)
    with Evaluator(task, EvalSettings(device="cpu", timeout_s=3, warmup=0, iterations=1)) as ev:
        r = ev.evaluate(HANGS, "hang", workloads, baseline)
        assert r.status == "TIMEOUT" and "timeout" in r.log
        ev.settings.timeout_s = 60
        assert ev.evaluate(CORRECT, "ok", workloads, baseline).passed


def test_crash_is_contained(evaluator, workloads, baseline):
    r = evaluator.evaluate(CRASHES, "crash", workloads, baseline)
    assert r.status == "RUNTIME_ERROR" and "exit code 3" in r.log
    assert evaluator.evaluate(CORRECT, "ok", workloads, baseline).passed
