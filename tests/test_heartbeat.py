"""Long evaluation steps say they are still running (no step is silent for more than 30 s)."""

from __future__ import annotations

import time

from ksearch.eval.parent import evaluator
from ksearch.eval.parent.evaluator import HEARTBEAT_S, heartbeat


def test_a_long_block_reports_while_it_runs_and_stops_after():
    lines: list[str] = []
    with heartbeat("judging k1 on 5 workloads", lines.append, every_s=0.05):
        time.sleep(0.28)
    n = len(lines)
    time.sleep(0.15)
    assert 3 <= n <= 6 and len(lines) == n, lines            # nothing after the block ends
    assert all(line.startswith("still judging k1 on 5 workloads (") and line.endswith("s)") for line in lines)


def test_a_short_block_is_silent_and_none_means_silent():
    lines: list[str] = []
    with heartbeat("x", lines.append, every_s=5.0):
        pass
    with heartbeat("x", None, every_s=0.01):
        time.sleep(0.05)
    assert lines == []


def test_the_interval_keeps_every_step_under_30_seconds_of_silence():
    assert HEARTBEAT_S < 30


def test_the_evaluator_beats_while_its_worker_works(monkeypatch):
    """The label names what runs: the candidate ids and how many workloads."""
    lines: list[str] = []

    class SlowWorker:
        pid = 1

        def alive(self):
            return True

        def request(self, kind, payload, timeout, startup_timeout):
            time.sleep(0.2)
            return evaluator.Reply("ok", [], "", 0)

        def kill(self):
            pass

    monkeypatch.setattr(evaluator, "HEARTBEAT_S", 0.05)
    ev = evaluator.Evaluator.__new__(evaluator.Evaluator)
    ev.settings, ev.notify, ev._worker = evaluator.EvalSettings(device="cpu"), lines.append, SlowWorker()
    ev._request("judge", None, 10.0, "judging k9 on 3 workloads")
    assert lines and all("judging k9 on 3 workloads" in line for line in lines)
