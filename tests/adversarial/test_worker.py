"""The worker keeps serving honest kernels after each bad one; whole process groups die on a timeout."""

import os
import time

from ksearch.eval.evaluator import Evaluator
from ksearch.eval.report import PASSED
from ksearch.eval.sandbox import wait_for
from tests.adversarial import kernels as k
from tests.adversarial.conftest import settings

SPAWNS_CHILD_AND_HANGS = '''
import subprocess, sys, time

_child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open("/tmp/ksearch_test_child_pid", "w").write(str(_child.pid))


def run(*args):
    time.sleep(600)
'''


def test_good_kernels_keep_passing_between_bad_ones(task, workloads, baseline):
    bad = [("hang", k.HANG, "TIMEOUT"), ("abort", k.ABORT, "RUNTIME_ERROR"),
           ("memo", k.MEMOISED, "INCORRECT_NUMERICAL"), ("mutates", k.MUTATES_INPUT, "INCORRECT_INPUT_MODIFIED"),
           ("timer", k.PATCHES_TIMER, "INCORRECT_TAMPERING")]
    with Evaluator(task, settings(timeout_s=4, static_checks=False)) as ev:
        assert ev.evaluate(k.GOOD, "good0", workloads, baseline).status == PASSED
        for name, source, status in bad:
            pid = ev.worker_pid
            r = ev.evaluate(source, name, workloads, baseline)
            assert r.status == status, (name, r.summary())
            assert ev.worker_pid != pid           # replaced after any failure
            good = ev.evaluate(k.GOOD, f"good_after_{name}", workloads, baseline)
            assert good.status == PASSED, (name, good.summary(), good.log[-1500:])
            assert not good.flags, good.flags


def test_timeout_kills_the_whole_process_group(task, workloads, baseline):
    path = "/tmp/ksearch_test_child_pid"
    if os.path.exists(path):
        os.unlink(path)
    with Evaluator(task, settings(timeout_s=4, static_checks=False)) as ev:
        r = ev.evaluate(SPAWNS_CHILD_AND_HANGS, "spawner", workloads, baseline)
    assert r.status == "TIMEOUT"
    child = int(open(path).read())

    def gone() -> bool:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            return True
        # a zombie waiting for init to reap it is gone for our purposes
        with open(f"/proc/{child}/stat") as f:
            return f.read().split()[2] == "Z"
    assert wait_for(gone, 5), "the candidate's child outlived the timeout"


def test_remeasure_interleaves_and_names_a_crasher(task, workloads, baseline):
    with Evaluator(task, settings(timeout_s=20, static_checks=False)) as ev:
        t0 = time.perf_counter()
        a, b = ev.remeasure([(k.GOOD, "a"), (k.GOOD + "\n# same kernel, other id\n", "b")], workloads, baseline)
        assert a.status == PASSED and b.status == PASSED and a.solution_id == "a" and b.solution_id == "b"
        assert len(a.workloads[0].trial_ms) == 3 and a.env["input_nonce"] == b.env["input_nonce"]
        good, crash = ev.remeasure([(k.GOOD, "good"), (k.SEGFAULT_SIGNAL, "crash")], workloads, baseline)
        assert good.status == PASSED and crash.status == "RUNTIME_ERROR" and "SIGSEGV" in crash.log
        assert time.perf_counter() - t0 < 60
