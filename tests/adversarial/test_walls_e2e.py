"""Issue 21's sandbox classes, end to end through the evaluator: each trick fails with a named status or gains
nothing, leaves nothing on the host, and an honest kernel judged right after it passes.

Two evaluators: `unchecked` (static checks off: the audit hook meets the trick first, and its refusal ends the
process) and `bare` (static checks and the audit hook off: only the kernel's walls stand, see
ksearch.eval.isolation.walls). What `bare` can show depends on the walls this machine allows; those assertions follow the
plan the fork server reports and are skipped where a wall is missing.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from ksearch.eval.parent.evaluator import Evaluator
from ksearch.eval.report import BaselineTimes, Status
from ksearch.task import load_task
from tests.adversarial import kernels as k
from tests.adversarial import kernels_walls as kw
from tests.adversarial.conftest import settings

FAILED = {Status.INCORRECT_TAMPERING, Status.INCORRECT_NUMERICAL, Status.RUNTIME_ERROR}


@pytest.fixture(scope="module")
def plan():
    from ksearch.eval.isolation.forkserver import ForkServer
    from ksearch.eval.trusted.memory import default_cpu_limit_bytes

    with ForkServer(interpret=True, memory_limit_bytes=default_cpu_limit_bytes()) as s:   # as the evaluators'
        return s.walls_plan


def _clean(*paths: str) -> None:
    for p in paths:
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.lexists(p):
            os.unlink(p)


def _honest_after(ev: Evaluator, workloads, baseline, name: str) -> None:
    honest = ev.evaluate(k.GOOD, f"good_after_{name}", workloads, baseline)
    assert honest.status == Status.PASSED and honest.score, honest.summary() + honest.log[-2000:]


@pytest.mark.parametrize("name,expected", [
    ("SPAWNV_SHELL", "starting a process"),
    ("POSIXSUBPROCESS_SHELL", "afresh"),
    ("NUMPY_CTYPESLIB", "the candidate wrote this file itself"),
    ("CPP_EXTENSION_AT_RUN_TIME", "may only be started by the toolchain"),
    ("CUDA_BUILDER_FROM_PYTHON", "may only be started by the toolchain"),
    ("EXTENSION_FROM_SCRATCH", "the candidate wrote this file itself"),
    ("PATH_MAX_ESCAPE", "cannot be resolved"),
    ("REWRITES_TASK", "the task's files"),
    ("SHM_LEFTOVER", "creating shared memory"),
])
def test_the_audit_hook_refuses_and_the_refusal_is_tampering(unchecked, workloads, baseline, name, expected):
    _clean(kw.SPAWNV_MARK, kw.PATH_MAX_MARK, "/sys/fs/cgroup/ksearch_walls_cg", f"/dev/shm/{kw.SHM_NAME}")
    r = unchecked.evaluate(getattr(kw, name), name.lower(), workloads, baseline)
    assert r.status == Status.INCORRECT_TAMPERING and expected in r.summary() + r.log, r.summary() + r.log[-2000:]
    assert not os.path.exists(kw.SPAWNV_MARK) and not os.path.exists(kw.PATH_MAX_MARK)
    assert not os.path.exists(f"/dev/shm/{kw.SHM_NAME}")
    _honest_after(unchecked, workloads, baseline, name.lower())


@pytest.mark.parametrize("name", ["SILENCED_REFUSAL", "CLOSED_STDERR_REFUSAL"])
def test_a_silenced_refusal_is_still_tampering(unchecked, workloads, baseline, name):
    r = unchecked.evaluate(getattr(kw, name), name.lower(), workloads, baseline)
    assert r.status == Status.INCORRECT_TAMPERING and "refused" in r.summary(), r.summary() + r.log[-2000:]
    assert r.score is None
    _honest_after(unchecked, workloads, baseline, name.lower())


@pytest.mark.parametrize("name,status", [
    # the trick itself works inside (the kernel then returns zeros, which the judge fails) ...
    ("SPAWNV_SHELL", Status.INCORRECT_NUMERICAL), ("POSIXSUBPROCESS_SHELL", Status.INCORRECT_NUMERICAL),
    ("NUMPY_CTYPESLIB", Status.INCORRECT_NUMERICAL), ("EXTENSION_FROM_SCRATCH", Status.INCORRECT_NUMERICAL),
    # ... or the kernel refuses the write outright (a read-only mount, Landlock)
    ("PATH_MAX_ESCAPE", Status.RUNTIME_ERROR), ("SHM_LEFTOVER_NATIVE", None), ("SHM_LEFTOVER", None),
])
def test_without_the_audit_hook_the_walls_hold(bare, plan, workloads, baseline, name, status):
    """No audit hook: the shell runs, the library loads, the path is opened. None of it reaches the host."""
    if not (plan.mount or plan.landlock_abi):
        pytest.skip(f"no walls that confine writes here: {plan.describe()}")
    _clean(kw.SPAWNV_MARK, kw.PATH_MAX_MARK, "/sys/fs/cgroup/ksearch_walls_cg", f"/dev/shm/{kw.SHM_NAME}")
    r = bare.evaluate(getattr(kw, name), name.lower(), workloads, baseline)
    # a private /dev/shm takes the segment (zeros: NUMERICAL); Landlock alone refuses it (RUNTIME_ERROR)
    status = status or (Status.INCORRECT_NUMERICAL if plan.mount else Status.RUNTIME_ERROR)
    assert r.status == status and r.score is None, r.summary()
    time.sleep(0.2)
    assert not os.path.exists(kw.SPAWNV_MARK), "the shell wrote outside the sandbox"
    assert not os.path.exists("/sys/fs/cgroup/ksearch_walls_cg"), "the shell made a cgroup"
    assert not os.path.exists(kw.PATH_MAX_MARK), "the long path escaped the scratch folder"
    assert not os.path.exists(f"/dev/shm/{kw.SHM_NAME}"), "a shared-memory segment outlived the candidate"
    _honest_after(bare, workloads, baseline, name.lower())


def _copy_task(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    src = load_task(k.TASK).dir
    shutil.copytree(src, root / k.TASK, ignore=shutil.ignore_patterns("strategies", "__pycache__"))
    return root


def test_an_escape_does_not_last(tmp_path, workloads):
    """The task's files are the judge's snapshot: rewriting them on disk (here by the test, as an escaped
    candidate would) changes nothing for the next evaluation, a new worker or a new evaluator."""
    root = _copy_task(tmp_path)
    task = load_task(k.TASK, root)
    base = BaselineTimes("cpu", {"reference": {w.name: 1.0 for w in workloads}}, "fixed 1 ms")
    with Evaluator(task, settings(static_checks=False)) as ev:
        assert ev.evaluate(kw.ZEROS, "zeros_before", workloads, base).status == Status.INCORRECT_NUMERICAL
        (root / k.TASK / "task.yaml").write_text("correctness: {atol: 1.0e+30, rtol: 1.0e+30}\n")
        (root / k.TASK / "reference.py").write_text("import torch\n\ndef run(q, *a):\n    b, h, d = q.shape\n"
                                                    "    return torch.zeros(b, h, d, dtype=torch.bfloat16), "
                                                    "torch.zeros(b, h)\n")
        assert ev.evaluate(kw.ZEROS, "zeros_after", workloads, base).status == Status.INCORRECT_NUMERICAL
        ev.close()                                          # a new worker reads nothing from disk either
        assert ev.evaluate(kw.ZEROS, "zeros_new_worker", workloads, base).status == Status.INCORRECT_NUMERICAL
    with Evaluator(load_task(k.TASK, root), settings(static_checks=False)) as ev:   # same process: same snapshot
        assert ev.evaluate(kw.ZEROS, "zeros_new_evaluator", workloads, base).status == Status.INCORRECT_NUMERICAL


def test_a_candidate_cannot_rewrite_the_task(tmp_path, plan, workloads):
    if not (plan.mount or plan.landlock_abi):
        pytest.skip(f"no walls that confine writes here: {plan.describe()}")
    root = _copy_task(tmp_path)
    before = (root / k.TASK / "task.yaml").read_text()
    base = BaselineTimes("cpu", {"reference": {w.name: 1.0 for w in workloads}}, "fixed 1 ms")
    with Evaluator(load_task(k.TASK, root), settings(static_checks=False, sandbox=False)) as ev:
        r = ev.evaluate(kw.REWRITES_TASK, "rewrites_task", workloads, base)
        assert r.status in FAILED, r.summary()
        assert (root / k.TASK / "task.yaml").read_text() == before
        assert ev.evaluate(kw.ZEROS, "zeros_after_rewrite", workloads, base).status == Status.INCORRECT_NUMERICAL


def test_a_half_sent_frame_ends_at_the_candidates_timeout(task, workloads, baseline):
    with Evaluator(task, settings(timeout_s=3, static_checks=False)) as ev:
        t0 = time.monotonic()
        r = ev.evaluate(kw.HALF_FRAME, "half_frame", workloads, baseline)
        assert r.status == Status.TIMEOUT, r.summary()
        assert time.monotonic() - t0 < 30
        _honest_after(ev, workloads, baseline, "half_frame")


@pytest.mark.parametrize("name", ["HUGE_REPLY", "NESTED_HEADER"])
def test_a_hostile_reply_fails_only_its_candidate(bare, workloads, baseline, name):
    """Judged side by side with an honest kernel in one job: only the hostile one fails, quickly."""
    t0 = time.monotonic()
    bad, good = bare.remeasure([(getattr(kw, name), name.lower()), (k.GOOD, "good_beside_" + name.lower())],
                               workloads, baseline)
    assert bad.status == Status.INCORRECT_TAMPERING and "reply" in bad.summary(), bad.summary()
    assert good.status == Status.PASSED, good.summary() + good.log[-2000:]
    assert time.monotonic() - t0 < 60


def test_a_kernel_that_skips_sequences_past_the_third_fails(checked, task):
    tiny = task.workload_set("tiny")
    assert max(len(w.params["kv_lens"]) for w in tiny) >= 5
    base = BaselineTimes("cpu", {"reference": {w.name: 1.0 for w in tiny}}, "fixed 1 ms")
    r = checked.evaluate(kw.FIRST_THREE_SEQUENCES, "first_three", tiny, base)
    assert r.status == Status.INCORRECT_NUMERICAL, r.summary()


def test_the_report_says_which_walls_held(unchecked, workloads, baseline, plan):
    r = unchecked.evaluate(k.GOOD, "good_env", workloads, baseline)
    assert r.status == Status.PASSED
    assert r.env.get("sandbox") == plan.describe(), r.env.get("sandbox")
