"""search.parallel=N: cycles side by side on different nodes, applied by one owner in cycle order.

The scripted evaluator sleeps a random few milliseconds so that cycles finish in a different order from
run to run: the decisions must not change (the owner applies cycles in cycle-id order), nothing may be
measured twice, and a crash followed by a resume (even with another N) must lose nothing.
"""

import json
import random
import threading
import time
from pathlib import Path

import pytest

from ksearch.store import read_records
from ksearch.store import records as R
from tests.test_search import ScriptedEvaluator, by_block, make_search


class JitteryEvaluator(ScriptedEvaluator):
    """Deterministic scores, random durations, thread-safe; remembers how many ran at once."""

    def __init__(self, judge, crash_at=None, seed=None):
        super().__init__(judge, crash_at)
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.running = self.peak = 0

    def evaluate(self, source, solution_id, workloads, baseline):
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            pause = self.rng.uniform(0.0, 0.05)
        try:
            time.sleep(pause)
            with self.lock:
                return super().evaluate(source, solution_id, workloads, baseline)
        finally:
            with self.lock:
                self.running -= 1

    confirm = evaluate          # a held-out confirmation is an evaluation here


def parallel_search(path, judge=by_block, crash_at=None, seed=None, **over):
    ev = JitteryEvaluator(judge, crash_at, seed)
    s, _, j = make_search(path, judge, evaluator=ev, **over)
    return s, ev, j


def owner_decisions(run: Path) -> list[str]:
    """The owner's records (not the cycles' own, whose order is timing), without times."""
    out = []
    for r in read_records(run / "journal.jsonl")[0]:
        if _cycle_work(r):
            continue
        ident = {k: getattr(r, k, None) for k in ("kind", "key", "node_id", "solution_id", "purpose", "ok", "round",
                                                  "stop", "cycle", "score")}
        out.append(json.dumps(ident, sort_keys=True))
    return out


def _cycle_work(r: R.Record) -> bool:
    return isinstance(r, (R.ModelCall, R.Evaluation)) and r.cycle is not None


def cycle_work(run: Path) -> set[str]:
    return {json.dumps([r.kind, r.cycle, r.key]) for r in read_records(run / "journal.jsonl")[0] if _cycle_work(r)}


def check_journal(run: Path) -> list[R.Record]:
    recs = read_records(run / "journal.jsonl")[0]
    assert [r.seq for r in recs] == list(range(len(recs)))          # one contiguous journal
    evals = [r.key for r in R.of_kind(recs, R.Evaluation)]
    assert len(evals) == len(set(evals))                                # nothing measured twice
    return recs


def test_cycles_run_side_by_side_on_different_nodes(tmp_path):
    s, ev, j = parallel_search(tmp_path, max_rounds=10, parallel=3)
    out = s.run()
    j.close()
    recs = check_journal(s.run_dir.path)
    assert out.evaluations == len(ev.calls) <= 10 and out.evaluations >= 8
    assert ev.peak >= 2                                                 # evaluations overlapped
    selects = R.of_kind(recs, R.Select)
    assert [r.cycle for r in selects] == list(range(1, len(selects) + 1))
    # never two cycles in flight on one node: a node is selected again only after its cycle was applied
    in_flight: dict[str, int | None] = {}
    for r in recs:
        if isinstance(r, R.Select):
            assert r.node_id not in in_flight, r
            in_flight[r.node_id] = r.cycle
        elif isinstance(r, (R.Attach, R.CycleFailed)):
            in_flight.pop(r.node_id)
    scores = [r.value["score"] for r in R.of_kind(recs, R.Evaluation) if r.value["score"]]
    assert out.best.score == max(scores)


def test_decisions_do_not_depend_on_which_cycle_finishes_first(tmp_path):
    runs = []
    for seed in (1, 2):
        s, ev, j = parallel_search(tmp_path / str(seed), seed=seed, max_rounds=10, parallel=3)
        s.run()
        j.close()
        runs.append(s.run_dir.path)
    assert owner_decisions(runs[0]) == owner_decisions(runs[1])
    assert cycle_work(runs[0]) == cycle_work(runs[1])


@pytest.mark.parametrize("resume_parallel", [3, 1, 4])
def test_crash_then_resume_loses_nothing_and_may_change_n(tmp_path, resume_parallel):
    full, ev_full, j = parallel_search(tmp_path / "full", max_rounds=10, parallel=3)
    full.run()
    j.close()

    s, ev, j = parallel_search(tmp_path / "cut", crash_at=5, max_rounds=10, parallel=3)
    with pytest.raises(KeyboardInterrupt):
        s.run()
    j.close()
    first = list(ev.calls)
    s, ev, j = parallel_search(tmp_path / "cut", max_rounds=10, parallel=resume_parallel)
    out = s.run()
    j.close()
    recs = check_journal(s.run_dir.path)
    assert not set(first) & set(ev.calls) or len(first) + len(ev.calls) == len(set(first + ev.calls))
    if resume_parallel == 3:                 # the same settings: the same run as an uninterrupted one
        assert owner_decisions(s.run_dir.path) == owner_decisions(full.run_dir.path)
        assert sorted(first + ev.calls) == sorted(ev_full.calls)
    else:                                    # the new N is recorded where it took effect
        assert any("search.parallel" in r.changed for r in R.of_kind(recs, R.ConfigChange))
    assert out.evaluations == len(R.of_kind(recs, R.Evaluation)) <= 10
    assert isinstance(recs[-2], R.RunEnd) or isinstance(recs[-1], R.TreeSnapshot)
