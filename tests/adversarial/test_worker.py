"""Every candidate gets a fresh process: honest kernels keep passing after bad ones, and nothing a
candidate starts outlives it."""

import os
import time

from ksearch.eval.parent.evaluator import Evaluator
from ksearch.eval.parent.worker_handle import wait_for
from ksearch.eval.report import Status
from tests.adversarial import kernels as k
from tests.adversarial.conftest import settings

SPAWNS_CHILD_AND_HANGS = '''
import subprocess, sys, time

_child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def run(*args):
    time.sleep(600)
'''


def test_good_kernels_keep_passing_between_bad_ones(task, workloads, baseline):
    bad = [("hang", k.HANG, "TIMEOUT"), ("abort", k.ABORT, "RUNTIME_ERROR"),
           ("memo", k.MEMOISED_COPY, "INCORRECT_NUMERICAL"), ("mutates", k.MUTATES_INPUT, "INCORRECT_INPUT_MODIFIED"),
           ("poison", k.POISONS_REFERENCE, "INCORRECT_NUMERICAL")]
    with Evaluator(task, settings(timeout_s=6, static_checks=False)) as ev:
        assert ev.evaluate(k.GOOD, "good0", workloads, baseline).status == Status.PASSED
        judge_pid = ev.worker_pid
        for name, source, status in bad:
            r = ev.evaluate(source, name, workloads, baseline)
            assert r.status == status, (name, r.summary())
            assert ev.worker_pid == judge_pid     # the trusted worker never ran the candidate: it stays
            good = ev.evaluate(k.GOOD, f"good_after_{name}", workloads, baseline)
            assert good.status == Status.PASSED, (name, good.summary(), good.log[-1500:])
            assert not good.flags, good.flags


def _sleepers() -> set[int]:
    out = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"time.sleep(600)" in f.read():
                        out.add(int(pid))
            except OSError:
                pass
    return out


def test_a_candidate_that_starts_a_process_is_refused_and_leaves_nothing(task, workloads, baseline):
    before = _sleepers()
    with Evaluator(task, settings(timeout_s=4, static_checks=False)) as ev:
        r = ev.evaluate(SPAWNS_CHILD_AND_HANGS, "spawner", workloads, baseline)
    assert r.status in ("INCORRECT_TAMPERING", "TIMEOUT"), r.summary()
    assert wait_for(lambda: not (_sleepers() - before), 5), "the candidate's child outlived its evaluation"


def test_remeasure_interleaves_and_names_a_crasher(task, workloads, baseline):
    with Evaluator(task, settings(timeout_s=20, static_checks=False)) as ev:
        t0 = time.perf_counter()
        a, b = ev.remeasure([(k.GOOD, "a"), (k.GOOD + "\n# same kernel, other id\n", "b")], workloads, baseline)
        assert a.status == Status.PASSED and b.status == Status.PASSED and a.solution_id == "a" and b.solution_id == "b"
        assert len(a.workloads[0].trial_ms) == 3 and a.env["input_nonce"] == b.env["input_nonce"]
        good, crash = ev.remeasure([(k.GOOD, "good"), (k.SEGFAULT_SIGNAL, "crash")], workloads, baseline)
        assert good.status == Status.PASSED, good.summary()
        assert crash.status in (Status.RUNTIME_ERROR, Status.INCORRECT_TAMPERING), crash.summary()
        assert time.perf_counter() - t0 < 60
