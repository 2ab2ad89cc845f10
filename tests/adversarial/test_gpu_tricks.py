"""The same guarantees on a GPU (`-m gpu`): side streams, stream switches, device OOM, illegal addresses,
and baselines timed interleaved with the candidate."""

import pytest

from ksearch.eval.evaluator import EvalSettings, Evaluator
from ksearch.eval.report import (INCORRECT_LATE_WRITE, INCORRECT_NUMERICAL, INCORRECT_TAMPERING, PASSED,
                                 RUNTIME_ERROR)
from tests.adversarial import kernels as k

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu_eval(task):
    ev = Evaluator(task, EvalSettings(device="cuda", timeout_s=300, warmup=3, iterations=10, trials=3,
                                      check_trials=2, static_checks=False))
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def gpu_workloads(task):
    return task.workload_set("feedback")[:2]


@pytest.fixture(scope="module")
def gpu_baseline(gpu_eval, gpu_workloads):
    return gpu_eval.measure_baselines(gpu_workloads)


def test_honest_kernel_passes_with_interleaved_baselines(gpu_eval, gpu_workloads, gpu_baseline):
    r = gpu_eval.evaluate(k.GOOD, "good", gpu_workloads, gpu_baseline)
    assert r.status == PASSED, r.summary() + r.log[-2000:]
    assert set(r.baseline_ms) == set(gpu_baseline.variants)
    assert all(w.baseline_ms and w.spread is not None and len(w.trial_ms) == 3 for w in r.workloads)
    assert r.env["gpu"] and "driver" in r.env and "sm_clock_mhz" in r.env and r.score_spread is not None


def test_side_stream_work_is_caught(gpu_eval, gpu_workloads, gpu_baseline):
    r = gpu_eval.evaluate(k.SIDE_STREAM, "side_stream", gpu_workloads, gpu_baseline)
    caught = r.status in (INCORRECT_LATE_WRITE, INCORRECT_NUMERICAL) or any("stream" in f for f in r.flags)
    assert caught, (r.summary(), r.flags)


def test_leaving_another_stream_current_is_tampering(gpu_eval, gpu_workloads, gpu_baseline):
    r = gpu_eval.evaluate(k.LEAVES_STREAM, "leaves_stream", gpu_workloads, gpu_baseline)
    assert r.status == INCORRECT_TAMPERING and "stream" in r.summary()


def test_patching_cuda_events_is_tampering(gpu_eval, gpu_workloads, gpu_baseline):
    src = k.ATTEND + '''
torch.cuda.Event.elapsed_time = lambda self, other: 0.001


def run(*args):
    return _attend(*args)
'''
    r = gpu_eval.evaluate(src, "event_patch", gpu_workloads, gpu_baseline)
    assert r.status == INCORRECT_TAMPERING and "elapsed_time" in r.summary()


@pytest.mark.parametrize("name,needle", [("GPU_MEMORY_HOG", "out of memory"), ("GPU_ILLEGAL_ADDRESS", "")])
def test_device_faults_are_runtime_errors_and_the_next_kernel_passes(gpu_eval, gpu_workloads, gpu_baseline,
                                                                    name, needle):
    r = gpu_eval.evaluate(getattr(k, name), name.lower(), gpu_workloads, gpu_baseline)
    assert r.status == RUNTIME_ERROR and needle in r.summary().lower() + r.log.lower()
    assert gpu_eval.evaluate(k.GOOD, f"good_after_{name}", gpu_workloads, gpu_baseline).status == PASSED


@pytest.mark.parametrize("name,status", [("MEMOISED", INCORRECT_NUMERICAL), ("DEFERRED", INCORRECT_LATE_WRITE),
                                         ("UNWRITTEN", INCORRECT_NUMERICAL), ("REUSED_OUTPUT", INCORRECT_LATE_WRITE)])
def test_cpu_tricks_are_caught_on_the_gpu_too(gpu_eval, gpu_workloads, gpu_baseline, name, status):
    r = gpu_eval.evaluate(getattr(k, name), name.lower(), gpu_workloads, gpu_baseline)
    assert r.status == status, r.summary()
