"""The judge's CPUs apart from the candidates' on a GPU host (ksearch.eval.isolation.cpus), and the host's
counters of withheld CPU time the judge reads around its clock (ksearch.eval.clocks.hoststall)."""

from __future__ import annotations

import multiprocessing as mp
import os

from ksearch.eval.clocks.hoststall import HostCounters
from ksearch.eval.isolation import cpus


def test_the_judge_keeps_a_quarter_and_the_candidates_the_rest():
    split = cpus.plan(set(range(16)))
    assert split is not None and split.judge == (0, 1, 2, 3) and split.candidates == tuple(range(4, 16))
    assert cpus.plan(set(range(128))).judge == tuple(range(8))          # type: ignore[union-attr]
    assert cpus.plan(set(range(8))).judge == (0, 1)                     # type: ignore[union-attr]


def test_workers_on_different_gpus_split_their_own_share_of_the_host():
    host = set(range(128))          # an 8-GPU host: 16 CPUs a GPU
    shares = [cpus.plan(host, slot, 8) for slot in range(8)]
    assert shares[0].judge == (0, 1, 2, 3) and shares[0].candidates == tuple(range(4, 16))   # type: ignore[union-attr]
    assert shares[7].judge == (112, 113, 114, 115)                                           # type: ignore[union-attr]
    seen = [c for s in shares for c in s.judge + s.candidates]                               # type: ignore[union-attr]
    assert len(seen) == len(set(seen)) == 128
    assert cpus.plan(set(range(16)), 1, 4) is None          # a share of 4 CPUs: nothing to split


def test_a_cpu_worker_takes_the_whole_host():
    assert cpus.gpu_slot("cpu") == (0, 1)


def test_nothing_is_split_on_a_small_host():
    assert cpus.plan({0, 1}) is None and cpus.plan(set(range(7))) is None


def _pinned(q) -> None:
    import torch

    first = min(os.sched_getaffinity(0))
    cpus.run_on((first,))
    q.put((sorted(os.sched_getaffinity(0)), torch.get_num_threads(), first))


def test_run_on_pins_the_process_and_sizes_its_thread_team():
    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=_pinned, args=(q,))
    p.start()
    got, threads, first = q.get(timeout=60)
    p.join(30)
    assert got == [first] and threads == 1


def test_host_counters_difference_only_what_both_readings_have():
    before = HostCounters(throttled_periods=3, throttled_us=1000, pressure_us=None)
    after = HostCounters(throttled_periods=5, throttled_us=4500, pressure_us=77)
    assert after.since(before) == {"throttled_periods": 2, "throttled_ms": 3.5}
    reading = HostCounters.read()           # whatever this host offers; never raises
    assert reading.since(reading).get("pressure_ms", 0.0) == 0.0


def test_the_window_log_appends_one_json_line_per_window(tmp_path, monkeypatch):
    import json

    from ksearch.eval.report import WindowBreakdown
    from ksearch.eval.trusted import judge

    path = tmp_path / "windows.log"
    window = judge._Window(12.5, {}, host={"pressure_ms": 0.2})
    parts = WindowBreakdown(which="", mode="graph", calls=10, ms=12.5, parts_ms={"send": 0.1, "candidate": 12.4})
    monkeypatch.setattr(judge, "WINDOW_LOG", "")
    judge._log_window("w1", window, parts, 10)
    assert not path.exists()                        # off unless asked for
    monkeypatch.setattr(judge, "WINDOW_LOG", str(path))
    judge._log_window("w1", window, parts, 10)
    judge._log_window("w2", window, parts, 10)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [x["workload"] for x in lines] == ["w1", "w2"]
    assert lines[0]["parts_ms"] == {"send": 0.1, "candidate": 12.4} and lines[0]["host"] == {"pressure_ms": 0.2}
