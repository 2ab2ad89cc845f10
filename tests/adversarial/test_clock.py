"""The clock is the judge's (issue 21, "the clock measures a process the candidate controls").

The candidate's process learns a call's inputs only when the judge's clock starts (shared memory handed over
with the request), and the clock stops when the judge holds a copy of the outputs, which it then verifies.
Each kernel here (tests.adversarial.clock_kernels) tries to make its calls look faster than the work they
do. Each either fails with a named status or gains nothing: it passes with a latency no better than an honest
kernel's. An honest kernel judged right after it passes with an honest score, and a cheating seed solution
never becomes a run's best.
"""

import pytest

from ksearch.eval.report import Status
from tests.adversarial import clock_kernels as ck
from tests.adversarial import kernels as k

# Below this fraction of an honest kernel's latency a trick would have gained something. The tricks that
# pass do the honest kernel's work (or more); the margin is for a shared CPU's noise. Both are timed in one
# job, their calls interleaved on the same fresh inputs (Evaluator.remeasure), so drift hits them alike.
GAIN_FLOOR = 0.6


def _beside_honest(evaluator, workloads, baseline, name):
    """(the trick's report, an honest kernel's report) from one job that times them side by side."""
    trick, honest = evaluator.remeasure([(getattr(ck, name), name.lower()), (k.GOOD, "honest_beside_" + name.lower())],
                                        workloads, baseline)
    assert honest.status == Status.PASSED, honest.summary() + honest.log[-2000:]
    return trick, honest


def _honest_after(evaluator, workloads, baseline, honest, name):
    r = evaluator.evaluate(k.GOOD, "good_after_" + name.lower(), workloads, baseline)
    assert r.status == Status.PASSED, r.summary() + r.log[-2000:]
    assert r.score is not None and r.score > 0
    fastest, before = min(r.workloads[0].trial_ms), min(honest.workloads[0].trial_ms)
    assert 0.2 < fastest / before < 5.0, (r.workloads[0].trial_ms, honest.workloads[0].trial_ms)


def _no_gain(trick, honest):
    """Compared on each one's fastest timed call: a busy machine only ever adds time, and no trick can make a
    single window shorter than its work."""
    fastest, honest_fastest = min(trick.workloads[0].trial_ms), min(honest.workloads[0].trial_ms)
    assert fastest >= GAIN_FLOOR * honest_fastest, (trick.workloads[0].trial_ms, honest.workloads[0].trial_ms)


@pytest.mark.parametrize("name,allowed", [
    ("PRESEND_AT_IMPORT", {Status.INCORRECT_TAMPERING, Status.INCORRECT_NUMERICAL}),     # a reply before the load's
    ("PRESEND_IN_CALL", {Status.INCORRECT_TAMPERING, Status.INCORRECT_NUMERICAL}),       # the next reply written ahead
    ("PRESEND_THREAD", {Status.INCORRECT_TAMPERING, Status.INCORRECT_NUMERICAL}),        # "done" always waiting
    # every send followed by a "done"
    ("WRAPS_SEND_INTERNALS", {Status.INCORRECT_TAMPERING, Status.INCORRECT_NUMERICAL}),
    ("TAKEOVER_EARLY_REPLY", {Status.INCORRECT_NUMERICAL}),                       # its own loop: "done", then work
    ("TAKEOVER_STALE", {Status.INCORRECT_NUMERICAL}),                             # the last call's outputs, "done"
    ("TAKEOVER_CLAIMS_PASSED", {Status.RUNTIME_ERROR, Status.INCORRECT_NUMERICAL}),   # "status": "PASSED", no outputs
    ("SKIPS_OUTPUT_COPY", {Status.INCORRECT_NUMERICAL, Status.INCORRECT_LATE_WRITE}),  # the harness's copy: a no-op
])
def test_a_reply_ahead_of_the_work_fails_or_gains_nothing(unchecked, workloads, baseline, name, allowed):
    """A "done" that overtakes the work fails: the judge copies the output slots when the reply arrives and
    finds NaN or stale values. Its only way to pass is for the work to be finished before that copy, inside
    the judge's window: then it is timed in full (a race the candidate may win on a busy machine)."""
    r, honest = _beside_honest(unchecked, workloads, baseline, name)
    if r.status == Status.PASSED:
        _no_gain(r, honest)
    else:
        assert r.status in allowed, r.summary() + "\n" + r.log[-2000:]
        assert r.score is None
    _honest_after(unchecked, workloads, baseline, honest, name)


@pytest.mark.parametrize("name", [
    "PRECOMPUTE_ON_SIGHT",      # hooks what the harness does with tensors, computes when it sees inputs
    "REPLACES_HARNESS",         # replaces the serve loop, the channel, wire.send, Connection.send_bytes
    "TAKEOVER_HONEST_CLAIMS",   # its own loop, none of the harness's work, a reply full of tiny times
])
def test_work_moved_or_harness_replaced_gains_nothing(unchecked, workloads, baseline, name):
    r, honest = _beside_honest(unchecked, workloads, baseline, name)
    assert r.status == Status.PASSED, r.summary() + "\n" + r.log[-2000:]
    _no_gain(r, honest)
    assert r.workloads[0].self_reported_ms is None          # its claims were not even recorded
    _honest_after(unchecked, workloads, baseline, honest, name)


def test_the_shared_file_cannot_be_shrunk_under_the_judge(bare, workloads, baseline):
    """Without audit hooks (the kernel-level wall alone): the call's truncation is refused, the judge keeps
    its worker, the kernel passes as the honest one it otherwise is."""
    started = bare.workers_started
    r = bare.evaluate(ck.TRUNCATES_SHARED, "truncates_shared", workloads, baseline)
    assert r.status == Status.PASSED, r.summary() + r.log[-1500:]
    assert bare.evaluate(k.GOOD, "good_after_truncates", workloads, baseline).status == Status.PASSED
    assert bare.workers_started == max(started, 1)


def test_the_other_kernels_of_a_job_are_stopped_while_one_is_timed(unchecked, workloads, baseline):
    """Side-by-side timing (near-ties): a kernel's background threads must not slow its rival's calls."""
    probe, slow = unchecked.remeasure([(ck.FROZEN_WHILE_OTHERS_RUN, "frozen_probe"), (ck.SLOW_HONEST, "slow_honest")],
                                      workloads, baseline)
    assert slow.status == Status.PASSED, slow.summary()
    assert probe.status == Status.PASSED, probe.summary() + probe.log[-1500:]


def test_tricks_are_caught_with_static_checks_and_audit_on_too(checked, workloads, baseline):
    """The default evaluator: the same tricks fail there (refused earlier, or by the judge)."""
    for name in ("PRESEND_IN_CALL", "TAKEOVER_EARLY_REPLY"):
        r = checked.evaluate(getattr(ck, name), name.lower(), workloads, baseline)
        assert r.status != Status.PASSED and r.score is None, r.summary()


def test_a_seed_solution_answering_before_its_work_never_becomes_the_best(tmp_path):
    """search.seed_solution with a loop of its own that says "done" before computing: it would time at
    nothing if the judge believed its replies."""
    from ksearch.cli.app import compose_config, execute
    from ksearch.instantiate import solution_from_text

    seed = tmp_path / "seed.py"
    seed.write_text(ck.TAKEOVER_EARLY_REPLY)
    cfg = compose_config([f"run.dir={tmp_path / 'run'}", "search.max_rounds=2", f"search.seed_solution={seed}",
                          "run.live=false", "eval.static_checks=false"])
    seed_id = solution_from_text(k.TASK, ck.TAKEOVER_EARLY_REPLY, name="seed:seed.py").solution_id
    outcome = execute(cfg, tmp_path / "run", fresh=True)
    assert outcome.best is None or outcome.best.solution_id != seed_id
