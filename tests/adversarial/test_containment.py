"""Point 1: crashes, hangs, floods of output and runaway allocations end as a status, never as a dead search.

With static checks on, the crash tricks are refused at their line; with them off they reach the worker,
which dies, and the parent reports how (the signal) with a log excerpt.
"""

import pytest

from ksearch.eval.parent.evaluator import Evaluator
from ksearch.eval.report import Status
from tests.adversarial import kernels as k
from tests.adversarial.conftest import settings


@pytest.mark.parametrize("name,signal_name", [
    ("SEGFAULT_CTYPES", "SIGSEGV"), ("SEGFAULT_SIGNAL", "SIGSEGV"), ("ABORT", "SIGABRT"),
])
def test_crashes_are_refused_statically(checked, workloads, baseline, name, signal_name):
    r = checked.evaluate(getattr(k, name), name.lower(), workloads, baseline)
    assert r.status == Status.COMPILE_ERROR and "line " in r.log


@pytest.mark.parametrize("name,signal_name", [
    ("SEGFAULT_CTYPES", "SIGSEGV"), ("SEGFAULT_SIGNAL", "SIGSEGV"), ("ABORT", "SIGABRT"),
])
def test_crashes_are_contained_at_runtime(bare, workloads, baseline, name, signal_name):
    r = bare.evaluate(getattr(k, name), name.lower(), workloads, baseline)
    assert r.status == Status.RUNTIME_ERROR and signal_name in r.log, r.log[-2000:]
    assert r.score is None


def test_native_code_is_refused_by_the_sandbox(unchecked, workloads, baseline):
    r = unchecked.evaluate(k.SEGFAULT_CTYPES, "segv", workloads, baseline)
    assert r.status == "INCORRECT_TAMPERING" and "ctypes" in r.summary(), r.summary()


def test_segfault_log_has_the_python_stack(bare, workloads, baseline):
    r = bare.evaluate(k.SEGFAULT_CTYPES, "segv", workloads, baseline)
    assert "Fatal Python error: Segmentation fault" in r.log and "string_at" in r.log


def test_infinite_loop_times_out(task, workloads, baseline):
    with Evaluator(task, settings(timeout_s=3)) as ev:
        r = ev.evaluate(k.HANG, "hang", workloads, baseline)
        assert r.status == Status.TIMEOUT and "timeout_s=3" in r.log


def test_endless_output_times_out_with_a_bounded_log(task, workloads, baseline):
    with Evaluator(task, settings(timeout_s=3)) as ev:
        r = ev.evaluate(k.PRINT_FOREVER, "print_forever", workloads, baseline)
    assert r.status == Status.TIMEOUT and "bytes omitted" in r.log and len(r.log) < 40_000


@pytest.mark.parametrize("name,static", [("HUGE_STDOUT_PYTHON", True), ("HUGE_STDOUT_FD", False)])
def test_huge_output_is_bounded_and_flagged(checked, bare, workloads, baseline, name, static):
    ev = checked if static else bare
    r = ev.evaluate(getattr(k, name), name.lower(), workloads, baseline)
    assert r.status == Status.PASSED, r.summary()
    assert any("MiB to stdout/stderr" in f for f in r.flags) and len(r.log) < 40_000


def test_giant_allocation_is_a_runtime_error(checked, workloads, baseline):
    r = checked.evaluate(k.GIANT_ALLOCATION, "giant", workloads, baseline)
    assert r.status == Status.RUNTIME_ERROR and "allocate" in r.first_failure().message


def test_exception_is_a_runtime_error_with_the_message(checked, workloads, baseline):
    r = checked.evaluate(k.RAISES, "raises", workloads, baseline)
    assert r.status == Status.RUNTIME_ERROR and "bad launch configuration" in r.summary()


def test_syntax_error_is_a_compile_error(checked, workloads, baseline):
    r = checked.evaluate("def run(*args):\n    return (\n", "broken", workloads, baseline)
    assert r.status == Status.COMPILE_ERROR and "SyntaxError" in r.summary()
