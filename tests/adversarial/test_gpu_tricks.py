"""The same guarantees on a GPU (`-m gpu`): the judge's clocks, the physical floor, side streams, device
faults, and the tricks of the judge-out-of-reach suite."""

import pytest

from ksearch.eval.parent.evaluator import EvalSettings, Evaluator
from ksearch.eval.report import Status
from tests.adversarial import kernels as k

pytestmark = pytest.mark.gpu

TRITON_COPY = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _noop(x_ptr):
    pass


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    # does no work at all and returns a result computed long ago: its time is below physics
    _noop[(1,)](q)
    return _CACHE
'''


@pytest.fixture(scope="module")
def gpu_eval(task):
    ev = Evaluator(task, EvalSettings(device="cuda", timeout_s=300, warmup=3, trials=3,
                                      check_trials=2, static_checks=False,
                                      profile=False))   # the advisory profile pass has its own GPU test
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def gpu_workloads(task):
    return task.workload_set("feedback")[:2]


@pytest.fixture(scope="module")
def gpu_baseline(gpu_eval, gpu_workloads):
    return gpu_eval.measure_baselines(gpu_workloads)


def test_baselines_carry_both_clocks_and_their_method(gpu_baseline, gpu_workloads):
    assert gpu_baseline.metric == "gpu_time" and gpu_baseline.variants
    for v, times in gpu_baseline.variants.items():
        assert set(times) == {w.name for w in gpu_workloads}
        assert gpu_baseline.methods[v] in ("cuda_graph", "cupti")
        assert all(gpu_baseline.other[v][w] > 0 for w in times)


def test_honest_kernel_passes_with_both_clocks(gpu_eval, gpu_workloads, gpu_baseline):
    r = gpu_eval.evaluate(k.GOOD, "good", gpu_workloads, gpu_baseline)
    assert r.status == Status.PASSED, r.summary() + r.log[-2000:]
    for w in r.workloads:
        assert w.gpu_time_ms and w.call_latency_ms and w.timing_method in ("cuda_graph", "eager_sync")
        assert w.latency_ms == w.gpu_time_ms and w.spread is not None
    assert r.env["gpu"] and "driver" in r.env and r.score_spread is not None


def test_side_stream_work_is_caught(gpu_eval, gpu_workloads, gpu_baseline):
    r = gpu_eval.evaluate(k.SIDE_STREAM, "side_stream", gpu_workloads, gpu_baseline)
    assert r.status in (Status.INCORRECT_LATE_WRITE, Status.INCORRECT_NUMERICAL, Status.PASSED), r.summary()
    if r.status == Status.PASSED:      # joined back in time: then its GPU time includes the side stream's work
        assert all(w.gpu_time_ms > 0 for w in r.workloads)


def test_patching_cuda_events_changes_nothing(gpu_eval, gpu_workloads, gpu_baseline):
    src = k.ATTEND + '''
torch.cuda.Event.elapsed_time = lambda self, other: 0.001


def run(*args):
    return _attend(*args)
'''
    honest = gpu_eval.evaluate(k.GOOD, "honest", gpu_workloads, gpu_baseline)
    r = gpu_eval.evaluate(src, "event_patch", gpu_workloads, gpu_baseline)
    assert r.status == Status.PASSED, r.summary()
    assert 0.5 < r.workloads[0].latency_ms / honest.workloads[0].latency_ms < 2


def test_a_time_below_physics_is_incorrect_timing(gpu_eval, gpu_workloads, gpu_baseline):
    src = k.ATTEND + TRITON_COPY.replace("return _CACHE", "return _attend_cached(q, k_cache, v_cache, kv_indptr, "
                                                          "kv_indices, sm_scale)") + '''

_memo = {}


def _attend_cached(*args):
    key = args[0].data_ptr()
    if key not in _memo:
        _memo[key] = _attend(*args)
    return tuple(t.clone() for t in _memo[key])
'''
    r = gpu_eval.evaluate(src, "no_work", gpu_workloads, gpu_baseline)
    assert r.status in (Status.INCORRECT_TIMING, Status.INCORRECT_NUMERICAL), r.summary()


@pytest.mark.parametrize("name,needle", [("GPU_MEMORY_HOG", "out of memory"), ("GPU_ILLEGAL_ADDRESS", "")])
def test_device_faults_are_runtime_errors_and_the_next_kernel_passes(gpu_eval, gpu_workloads, gpu_baseline,
                                                                    name, needle):
    r = gpu_eval.evaluate(getattr(k, name), name.lower(), gpu_workloads, gpu_baseline)
    assert r.status in (Status.RUNTIME_ERROR, Status.INCORRECT_TAMPERING)
    assert needle in r.summary().lower() + r.log.lower()
    assert gpu_eval.evaluate(k.GOOD, f"good_after_{name}", gpu_workloads, gpu_baseline).status == Status.PASSED


@pytest.mark.parametrize("name", ["REACH_MODULES", "REACH_GC", "TOLERANCE_ZEROS", "VERDICT_NOOP", "POISONS_REFERENCE",
                                  "CONTENT_CACHE", "WRITES_FILE", "FORK_SETSID", "UNWRITTEN", "REUSED_OUTPUT"])
def test_out_of_reach_tricks_fail_on_the_gpu_too(gpu_eval, gpu_workloads, gpu_baseline, name):
    r = gpu_eval.evaluate(getattr(k, name), name.lower(), gpu_workloads, gpu_baseline)
    assert r.status not in (Status.PASSED,), r.summary()
    assert r.status in (Status.INCORRECT_TAMPERING, Status.INCORRECT_NUMERICAL, Status.INCORRECT_LATE_WRITE,
                        Status.RUNTIME_ERROR), r.summary()
