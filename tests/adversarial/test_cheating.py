"""Each way of gaming correctness fails with its reason (the candidate-side diagnostics name the honest
mistakes; the judge's own comparison catches everything else)."""

import pytest

from ksearch.eval.report import Status
from tests.adversarial import kernels as k


def test_honest_kernel_passes_with_spread_env_and_trials(checked, workloads, baseline):
    r = checked.evaluate(k.GOOD, "good", workloads, baseline)
    assert r.status == Status.PASSED, r.summary() + r.log
    w = r.workloads[0]
    assert len(w.trial_ms) == 3 and w.spread is not None and w.spread >= 0.05
    assert w.timing_method == "wall_clock_cpu" and w.call_latency_ms == w.latency_ms
    assert r.score is not None and r.score_spread is not None and r.flags == []
    assert r.env["device"] == "cpu" and "torch" in r.env and "input_nonce" in r.env


def test_a_result_remembered_from_an_earlier_call_fails(checked, workloads, baseline):
    r = checked.evaluate(k.MEMOISED_COPY, "memoised_copy", workloads, baseline)
    assert r.status == Status.INCORRECT_NUMERICAL, r.summary()
    assert "remembered from an earlier call" in r.first_failure().message


def test_a_cache_keyed_on_addresses_gains_nothing(checked, workloads, baseline):
    """Every call gets fresh inputs, revealed in memory mapped for that call alone (which may land at an address
    an earlier call's inputs had): a memo keyed on data pointers either never hits, and stays honest, or hands
    back a remembered result, which fails."""
    r = checked.evaluate(k.MEMOISED, "memoised", workloads, baseline)
    assert r.status in (Status.PASSED, Status.INCORRECT_LATE_WRITE, Status.INCORRECT_NUMERICAL), r.summary()
    if r.status == Status.PASSED:
        assert r.workloads[0].latency_ms > 0


def test_unwritten_output_elements_fail(checked, workloads, baseline):
    r = checked.evaluate(k.UNWRITTEN, "unwritten", workloads, baseline)
    assert r.status == Status.INCORRECT_NUMERICAL, r.summary()


def test_input_mutation_fails_and_names_the_input(checked, workloads, baseline):
    r = checked.evaluate(k.MUTATES_INPUT, "mutates", workloads, baseline)
    assert r.status == Status.INCORRECT_INPUT_MODIFIED and "input q" in r.first_failure().message


@pytest.mark.parametrize("name", ["IMPORTS_REFERENCE", "READS_REFERENCE_FILE"])
def test_reading_the_reference_is_refused(unchecked, workloads, baseline, name):
    r = unchecked.evaluate(getattr(k, name), name.lower(), workloads, baseline)
    assert r.status == Status.INCORRECT_TAMPERING and "refused" in r.summary(), r.summary()


def test_background_thread_writing_late_fails(unchecked, workloads, baseline):
    r = unchecked.evaluate(k.BACKGROUND_THREAD, "thread", workloads, baseline)
    assert r.status in (Status.INCORRECT_LATE_WRITE, Status.INCORRECT_NUMERICAL), r.summary()


def test_work_deferred_to_the_next_call_fails(checked, workloads, baseline):
    r = checked.evaluate(k.DEFERRED, "deferred", workloads, baseline)
    assert r.status in (Status.INCORRECT_LATE_WRITE, Status.INCORRECT_NUMERICAL), r.summary()


def test_reused_output_buffer_fails(checked, workloads, baseline):
    r = checked.evaluate(k.REUSED_OUTPUT, "reused", workloads, baseline)
    assert r.status == Status.INCORRECT_LATE_WRITE and "storage of the previous call" in r.first_failure().message


@pytest.mark.parametrize("name", ["PATCHES_TIMER", "PATCHES_CHECKER"])
def test_patching_a_timer_or_checker_in_its_own_process_changes_nothing(unchecked, workloads, baseline, name):
    """The clock and the comparison live in the judge: the patch reaches nothing, the score stays honest."""
    honest = unchecked.evaluate(k.GOOD, "honest_" + name.lower(), workloads, baseline)
    r = unchecked.evaluate(getattr(k, name), name.lower(), workloads, baseline)
    assert r.status == Status.PASSED, r.summary()
    ratio = r.workloads[0].latency_ms / honest.workloads[0].latency_ms
    assert 0.2 < ratio < 5, (r.workloads[0].latency_ms, honest.workloads[0].latency_ms)


def test_a_torch_function_computing_the_kernel_is_refused(checked, workloads, baseline):
    r = checked.evaluate(k.TORCH_SDPA, "sdpa", workloads, baseline)
    assert r.status == Status.COMPILE_ERROR and "scaled_dot_product_attention" in r.log and "line 9" in r.log


def test_a_reply_forged_on_a_socket_is_refused_or_fails(unchecked, workloads, baseline):
    r = unchecked.evaluate(k.FORGES_REPLY, "forged", workloads, baseline)
    assert r.status != Status.PASSED, r.summary()
