"""Point 2: each way of gaming correctness or timing fails (or is flagged) with its reason."""

import pytest

from ksearch.eval.report import (COMPILE_ERROR, INCORRECT_INPUT_MODIFIED, INCORRECT_LATE_WRITE,
                                 INCORRECT_NUMERICAL, INCORRECT_TAMPERING, PASSED)
from tests.adversarial import kernels as k


def test_honest_kernel_passes_with_spread_env_and_trials(checked, workloads, baseline):
    r = checked.evaluate(k.GOOD, "good", workloads, baseline)
    assert r.status == PASSED, r.summary() + r.log
    w = r.workloads[0]
    assert len(w.trial_ms) == 3 and w.spread is not None and w.spread >= 0.05
    assert r.score is not None and r.score_spread is not None and r.flags == []
    assert r.env["device"] == "cpu" and "torch" in r.env and "input_nonce" in r.env


@pytest.mark.parametrize("name", ["MEMOISED", "MEMOISED_COPY"])
def test_remembered_results_fail(checked, workloads, baseline, name):
    r = checked.evaluate(getattr(k, name), name.lower(), workloads, baseline)
    assert r.status == INCORRECT_NUMERICAL, r.summary()
    assert "remembered from an earlier call" in r.first_failure().message


def test_unwritten_output_elements_fail(checked, workloads, baseline):
    r = checked.evaluate(k.UNWRITTEN, "unwritten", workloads, baseline)
    assert r.status == INCORRECT_NUMERICAL, r.summary()


def test_input_mutation_fails_and_names_the_input(checked, workloads, baseline):
    r = checked.evaluate(k.MUTATES_INPUT, "mutates", workloads, baseline)
    assert r.status == INCORRECT_INPUT_MODIFIED and "input q" in r.first_failure().message


@pytest.mark.parametrize("name,reason", [
    ("IMPORTS_REFERENCE", "reference implementation"),
    ("READS_REFERENCE_FILE", "reference.py"),
])
def test_reading_the_reference_fails_at_runtime(unchecked, workloads, baseline, name, reason):
    r = unchecked.evaluate(getattr(k, name), name.lower(), workloads, baseline)
    assert r.status == INCORRECT_TAMPERING and reason in r.summary(), r.summary()


def test_background_thread_writing_late_fails(unchecked, workloads, baseline):
    r = unchecked.evaluate(k.BACKGROUND_THREAD, "thread", workloads, baseline)
    assert r.status == INCORRECT_LATE_WRITE, r.summary()
    assert "after the call returned" in r.first_failure().message
    assert any("thread" in f for f in r.flags)


def test_work_deferred_to_the_next_call_fails(checked, workloads, baseline):
    r = checked.evaluate(k.DEFERRED, "deferred", workloads, baseline)
    assert r.status == INCORRECT_LATE_WRITE and "next call" in r.first_failure().message, r.summary()


def test_reused_output_buffer_fails(checked, workloads, baseline):
    r = checked.evaluate(k.REUSED_OUTPUT, "reused", workloads, baseline)
    assert r.status == INCORRECT_LATE_WRITE and "storage of the previous call" in r.first_failure().message


@pytest.mark.parametrize("name,what", [("PATCHES_TIMER", "time.perf_counter"),
                                       ("PATCHES_CHECKER", "torch.Tensor.clone")])
def test_patching_timer_or_checker_fails_at_runtime(unchecked, workloads, baseline, name, what):
    r = unchecked.evaluate(getattr(k, name), name.lower(), workloads, baseline)
    assert r.status == INCORRECT_TAMPERING and what in r.summary(), r.summary()


def test_a_torch_function_computing_the_kernel_is_refused(checked, workloads, baseline):
    r = checked.evaluate(k.TORCH_SDPA, "sdpa", workloads, baseline)
    assert r.status == COMPILE_ERROR and "scaled_dot_product_attention" in r.log and "line 9" in r.log


def test_a_reply_forged_on_the_evaluators_socket_is_tampering(unchecked, workloads, baseline):
    r = unchecked.evaluate(k.FORGES_REPLY, "forged", workloads, baseline)
    assert r.status == INCORRECT_TAMPERING and "token" in r.log, r.summary()
