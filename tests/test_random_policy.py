"""search.policy=random: a uniform baseline arm over the same frontier, reproducible from run.seed and
resumable (the draw is a function of seed, round and candidates, not of generator state)."""

from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ksearch.config import Config
from ksearch.llm.offline import OfflineModel
from ksearch.planner.search import Search, Services, Target
from ksearch.planner.selection import POLICIES, random_pick
from ksearch.store import Journal, RunDir, read_records
from ksearch.store import records as R
from ksearch.task import load_task
from tests.fakes import TASK, ScriptedEvaluator, by_block


def _search(path: Path, seed: int, crash_at=None, max_rounds: int = 10):
    cfg = OmegaConf.merge(OmegaConf.structured(Config), {"search": {"policy": "random", "max_rounds": max_rounds},
                                                         "run": {"seed": seed}, "eval": {"validate": "none"}})
    task = load_task(TASK)
    run = RunDir(path)
    if not run.exists():
        run.create(OmegaConf.to_yaml(cfg))
    journal = Journal(run.journal_path, fsync=False)
    ev = ScriptedEvaluator(by_block, crash_at)
    return Search(cfg, Target(task, task.workload_set("tiny"), "tiny", "cpu"),
                  Services(OfflineModel(cfg.search.max_new_nodes), ev), run, journal), ev, journal


def _run(path: Path, seed: int, crash_at=None):
    s, ev, j = _search(path, seed, crash_at)
    try:
        return s.run(), ev
    finally:
        j.close()


def _selections(path: Path):
    return [(r.round, r.node_id) for r in R.of_kind(read_records(path / "journal.jsonl")[0], R.Select)]


def test_random_is_a_known_policy_and_its_draw_is_uniform_and_stable():
    assert "random" in POLICIES
    ids = ["a", "b", "c", "d"]
    assert random_pick(ids, 3, 7) == random_pick(list(reversed(ids)), 3, 7)      # order of candidates is irrelevant
    counts = Counter(random_pick(ids, 0, d) for d in range(4000))
    assert set(counts) == set(ids) and min(counts.values()) > 850                 # ~1000 each
    assert len({random_pick(ids, s, 1) for s in range(40)}) > 1                    # the seed matters


def test_random_policy_runs_reproducibly_and_resumes_to_the_same_choices(tmp_path):
    out, ev = _run(tmp_path / "a", seed=5)
    assert out.evaluations == 10 and out.best is not None
    picks = _selections(tmp_path / "a")
    assert len(picks) >= 4
    out_b, _ = _run(tmp_path / "b", seed=5)
    assert _selections(tmp_path / "b") == picks and out_b.best.solution_id == out.best.solution_id
    # Killed at the 6th evaluation, then resumed: the same selections as the uninterrupted run.
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "c", seed=5, crash_at=6)
    out_c, ev_c = _run(tmp_path / "c", seed=5)
    assert _selections(tmp_path / "c") == picks and len(ev_c.calls) == 5
    # A different seed explores differently (over 10 rounds the chance of identical picks is negligible).
    _run(tmp_path / "d", seed=6)
    assert _selections(tmp_path / "d") != picks


def test_random_policy_journals_its_reasoning_components(tmp_path):
    _run(tmp_path / "a", seed=1)
    sel = R.of_kind(read_records(tmp_path / "a" / "journal.jsonl")[0], R.Select)
    assert sel and all(r.policy == "random" and r.why["policy"] == "random" for r in sel)
