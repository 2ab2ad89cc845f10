"""The judge out of the candidate's reach (issue: reference, tolerance, verdict and clock outside its process).

Each kernel tries one way Python offers to reach what decides its verdict or its number, from its own
process. There is nothing there to reach: the reference, the tolerance, the comparison, the report and the
clock live in the trusted worker. Each trick ends with a named failure, and an honest kernel judged right
after it, by the same evaluator, still passes with an honest score.
"""

import os

import pytest

from ksearch.eval.report import Status
from tests.adversarial import kernels as k

REFUSED_OR_WRONG = {Status.INCORRECT_TAMPERING, Status.INCORRECT_NUMERICAL}


@pytest.mark.parametrize("name,allowed", [
    ("REACH_MODULES", {Status.INCORRECT_TAMPERING}),          # the task's files are closed to candidate code
    ("REACH_TRACEBACK_FRAMES", {Status.INCORRECT_TAMPERING}),  # frame introspection is refused
    ("REACH_GC", {Status.INCORRECT_TAMPERING}),                # gc introspection is refused
    ("REACH_GETFRAME", {Status.INCORRECT_TAMPERING}),
    ("TOLERANCE_ZEROS", REFUSED_OR_WRONG),              # its tolerance is not the judge's
    ("VERDICT_NOOP", REFUSED_OR_WRONG),                 # there is no verdict in its process
    ("POISONS_REFERENCE", REFUSED_OR_WRONG),            # nor a reference to poison
    ("FINALIZER_REWRITES", {Status.INCORRECT_TAMPERING}),      # nor a report to rewrite
    ("CONTENT_CACHE", {Status.INCORRECT_NUMERICAL}),           # timed and checked inputs are always fresh
    ("WRITES_FILE", {Status.INCORRECT_TAMPERING}),
    ("FORK_SETSID", {Status.INCORRECT_TAMPERING}),
])
def test_each_trick_fails_with_a_named_status_and_the_next_honest_kernel_passes(unchecked, workloads, baseline,
                                                                                 name, allowed):
    r = unchecked.evaluate(getattr(k, name), name.lower(), workloads, baseline)
    assert r.status in allowed, r.summary() + "\n" + r.log[-2000:]
    assert r.score is None
    honest = unchecked.evaluate(k.GOOD, "good_after_" + name.lower(), workloads, baseline)
    assert honest.status == Status.PASSED, honest.summary() + honest.log[-2000:]
    assert honest.score is not None and honest.score > 0


def test_no_file_was_written_and_no_process_survived(unchecked, workloads, baseline):
    for path in ("/tmp/ksearch_pwned.txt", "/tmp/ksearch_survivor.pid"):
        if os.path.exists(path):
            os.unlink(path)
    for name in ("WRITES_FILE", "FORK_SETSID"):
        unchecked.evaluate(getattr(k, name), name.lower(), workloads, baseline)
    assert not os.path.exists("/tmp/ksearch_pwned.txt")
    assert not os.path.exists("/tmp/ksearch_survivor.pid")


def test_work_skipped_past_a_tile_boundary_fails_on_the_cpu(checked, task, baseline):
    """The CPU workloads hold sequences longer than any tile (and ragged batches)."""
    tiny = task.workload_set("tiny")
    assert max(max(w.params["kv_lens"]) for w in tiny) > 300
    from ksearch.eval.report import BaselineTimes
    base = BaselineTimes("cpu", {"reference": {w.name: 1.0 for w in tiny}}, "fixed 1 ms")
    r = checked.evaluate(k.FIRST_128_TOKENS, "first_128", tiny, base)
    assert r.status == Status.INCORRECT_NUMERICAL, r.summary()


def test_a_cheating_seed_solution_never_becomes_the_best(tmp_path):
    """search.seed_solution with the tolerance trick: in the old judge it became the best at 15x."""
    from ksearch.cli.app import compose_config, execute

    seed = tmp_path / "seed.py"
    seed.write_text(k.TOLERANCE_ZEROS)
    cfg = compose_config([f"run.dir={tmp_path / 'run'}", "search.max_rounds=2", f"search.seed_solution={seed}",
                          "run.live=false", "eval.static_checks=false"])
    from ksearch.instantiate import solution_from_text

    seed_id = solution_from_text(k.TASK, k.TOLERANCE_ZEROS, name="seed:seed.py").solution_id
    outcome = execute(cfg, tmp_path / "run", fresh=True)
    assert outcome.best is None or outcome.best.solution_id != seed_id


def test_late_and_deferred_writes_still_fail(unchecked, workloads, baseline):
    for name in ("BACKGROUND_THREAD", "DEFERRED", "REUSED_OUTPUT"):
        r = unchecked.evaluate(getattr(k, name), name.lower(), workloads, baseline)
        assert r.status in {Status.INCORRECT_LATE_WRITE, Status.INCORRECT_NUMERICAL, Status.RUNTIME_ERROR,
                            Status.INCORRECT_TAMPERING}, (name, r.summary())
