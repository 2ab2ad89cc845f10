"""Typed journal records and the run state they fold into (store/records.py, store/state.py).

The records write exactly the lines ksearch wrote before they were typed, decode lines from older and
newer versions, and the state a live search holds is the state the fold of its journal gives, whether the
cycles ran one at a time or side by side.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ksearch.store import read_records
from ksearch.store import records as R
from ksearch.store.state import fold
from tests.test_search import by_block, make_search

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("run", sorted(FIXTURES.glob("run_*")), ids=lambda p: p.name)
def test_records_write_the_lines_an_older_ksearch_wrote(run):
    """Decoding a line of a run recorded at 49d329e and writing the record again gives the same bytes:
    every kind (validate, validate_verdict and dispatch included) keeps its keys, their order and nulls."""
    lines = (run / "journal.jsonl").read_text().splitlines()
    records, _ = read_records(run / "journal.jsonl")
    assert len(records) == len(lines) and all(type(r) is not R.Record for r in records)
    for line, rec in zip(lines, records):
        assert json.dumps(rec.to_json(), default=str, separators=(",", ":")) == line


def test_decoding_tolerates_other_versions():
    # a field of the wrong type gets its default; unknown fields are kept; an unknown kind stays a Record
    rec = R.decode({"seq": 3, "kind": "select", "node_id": "a", "round": "three", "cycle": 2, "new_field": [1]})
    assert isinstance(rec, R.Select) and (rec.node_id, rec.round, rec.cycle) == ("a", 0, 2)
    assert rec.extra == {"new_field": [1]}
    assert type(R.decode({"kind": "from_the_future", "x": 1})) is R.Record
    with pytest.raises(ValueError, match="no field node"):
        R.Select(node="a")                                 # a writer's typo is an error, never a new key
    # the source of a fork is written "from"; an evaluation from before `solution_id` names it in its report
    assert R.decode({"kind": "fork", "from": "/runs/a", "node": "n3"}).source == "/runs/a"
    old = R.decode({"kind": "evaluation", "key": "s@1", "round": 1, "value": {"solution_id": "s", "status": "PASSED",
                                                                             "device": "cpu"}})
    assert old.solution_id == "s" and old.report.passed
    # a dispatch that was not composed writes only why; a composed one never a reason
    assert R.Dispatch(composed=False, reason="no").to_json() == {"seq": -1, "kind": "dispatch", "t": None,
                                                                  "composed": False, "reason": "no"}
    assert "reason" not in R.Dispatch(composed=True, solution_id="d", accepted=False).to_json()
    assert R.Dispatch(composed=True, solution_id="d", accepted=True).check() == {
        "composed": True, "solution_id": "d", "accepted": True}


def _agree(live, folded, side_by_side: bool) -> None:
    assert folded.evaluation_count == live.evaluation_count
    assert folded.best.to_json() == live.best.to_json()
    assert folded.spend.to_json() == live.spend.to_json() and folded.usage == live.usage
    assert folded.rounds.used == live.rounds.used and folded.cycles == live.cycles
    assert folded.snapshot == live.tree.to_json()          # every batch of tree edits ends with a snapshot
    assert [b.solution_id for b in folded.bests] == [b.solution_id for b in live.bests]
    assert folded.validated == live.validated and folded.baselines == live.baselines
    key = (lambda e: e.key) if side_by_side else (lambda e: e.seq)   # cycles' records land in timing order
    assert sorted(map(key, folded.evaluations)) == sorted(map(key, live.evaluations))


@pytest.mark.parametrize("parallel", [1, 3])
def test_a_live_search_holds_the_state_its_journal_folds_into(tmp_path, parallel):
    s, ev, j = make_search(tmp_path, by_block, max_rounds=8, parallel=parallel)
    out = s.run()
    j.close()
    folded = fold(read_records(s.run_dir.journal_path)[0])
    _agree(out.state, folded, parallel > 1)
    assert out.evaluations == len(ev.calls) and folded.stop == out.stop_reason == "round budget used"
    assert folded.rounds.used == out.rounds_used == 8


def test_the_fold_closes_cycles_in_order_and_counts_their_rounds():
    """A cycle's rounds are its attempts (at least one), counted when the cycle is closed; a reply without
    code is an attempt of the cycle being applied (the oldest open one)."""
    ev = {"value": {"solution_id": "k", "status": "PASSED", "device": "cpu"}}
    records = [R.Select(node_id="a", cycle=1), R.Select(node_id="b", cycle=2),
               R.Evaluation(key="k@1", cycle=1, round=1, solution_id="k", **ev),
               R.Evaluation(key="k@2", cycle=2, round=2, solution_id="k", **ev),
               R.BadCode(round=3), R.Attach(node_id="a"), R.CycleFailed(node_id="b"), R.Select(node_id="c", cycle=3),
               R.CycleFailed(node_id="c")]
    state = fold(records)
    assert state.rounds.used == 2 + 1 + 1 and state.cycles == 3 and state.evaluation_count == 2
