"""Static checks refuse each trick before it runs, naming the line (no worker involved)."""

import pytest

from ksearch.eval.parent.static_checks import StaticCheckConfig, check_source
from ksearch.eval.report import Status
from tests.adversarial import kernels as k


def _lines(source: str, needle: str) -> list[int]:
    return [i for i, line in enumerate(source.splitlines(), 1) if needle in line]


@pytest.mark.parametrize("name,needle,reason", [
    ("SEGFAULT_CTYPES", "import ctypes", "ctypes"),
    ("SEGFAULT_SIGNAL", "os.kill", "os.kill"),
    ("ABORT", "os.abort", "os.abort"),
    ("HUGE_STDOUT_FD", "os.write", "os.write"),
    ("IMPORTS_REFERENCE", "from ksearch.task", "ksearch"),
    ("READS_REFERENCE_FILE", "open(_path)", "open"),
    ("BACKGROUND_THREAD", "import threading", "threading"),
    ("PATCHES_TIMER", "time.perf_counter = _fast_clock", "time.perf_counter"),
    ("PATCHES_CHECKER", "torch.Tensor.clone =", "torch.Tensor.clone"),
    ("TORCH_SDPA", "F.scaled_dot_product_attention", "scaled_dot_product_attention"),
    ("LEAVES_STREAM", None, None),
    ("FORGES_REPLY", "from multiprocessing.connection", "multiprocessing"),
])
def test_static_checks_name_the_line(task, name, needle, reason):
    source = getattr(k, name)
    violations = check_source(source, StaticCheckConfig.for_task(task))
    if needle is None:          # legal Python; the runtime guard catches it (GPU test)
        assert violations == []
        return
    want = _lines(source, needle)
    hit = [v for v in violations if v.line in want and reason in v.message]
    assert hit, (name, [str(v) for v in violations])


def test_honest_kernels_and_catalog_families_pass_the_static_checks(task):
    from ksearch.task import list_tasks, load_task
    from ksearch.task.catalog import load_catalog

    assert check_source(k.GOOD, StaticCheckConfig.for_task(task)) == []
    for name in list_tasks():
        t = load_task(name)
        cat = load_catalog(t.strategies_dir, t.name)
        for fam in cat.families:
            assert check_source(cat.render(fam.name, {}), StaticCheckConfig.for_task(t)) == [], (name, fam.name)


def test_a_refusal_is_a_compile_error_that_names_the_line(checked, workloads, baseline):
    r = checked.evaluate(k.IMPORTS_REFERENCE, "imports_reference", workloads, baseline)
    assert r.status == Status.COMPILE_ERROR and "line 2: imports ksearch.task" in r.log
    assert "line 2" in r.summary()


def test_aliases_and_strings_do_not_hide_a_forbidden_function(task):
    cfg = StaticCheckConfig.for_task(task)
    for src in ("import torch.nn.functional as G\nf = G.scaled_dot_product_attention\n",
                "from torch.nn.functional import scaled_dot_product_attention as s\n",
                "import torch\nf = getattr(torch.nn.functional, 'scaled_dot_product_attention')\n",
                "import torch\nname = 'scaled_dot_' + 'product_attention'\nf = getattr(torch.nn.functional, name)\n",
                "import torch\nE = torch.cuda.Event\nE.elapsed_time = lambda a, b: 0.0\n",
                "import torch\nsetattr(torch.cuda, 'synchronize', lambda: None)\n"):
        assert check_source(src, cfg), src


def test_cuda_sources_skip_the_python_checks(checked, workloads, baseline):
    src = '#include <torch/extension.h>\n#include <fstream>\ntorch::Tensor run(torch::Tensor q) { return q; }\n'
    r = checked._static_refusal(src, "cuda")
    assert r is None
