"""Runs you can stop and change: resume with new settings, budgets that end a run cleanly, forks, and
journals damaged by a crash."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ksearch.cli.app import ConfigError, compose_config, execute
from ksearch.config import Config
from ksearch.llm.offline import OfflineModel
from ksearch.planner.search import Search, Services, Target
from ksearch.store import Journal, JournalCorrupted, RunDir, read_records
from ksearch.store import records as R
from ksearch.store.fork import load_fork
from ksearch.task import load_task
from tests.fakes import TASK, FlakyModel, ScriptedEvaluator, by_block


def _search(path: Path, fork=None, model=None, **over):
    # validation (eval.validate) is tested in tests/test_validate.py; these tests count evaluations without it
    cfg = OmegaConf.merge(OmegaConf.structured(Config), {"eval": {"validate": "none"}}, over)
    task = load_task(TASK)
    run = RunDir(path)
    if not run.exists():
        run.create(OmegaConf.to_yaml(cfg))
    journal = Journal(run.journal_path, fsync=False)
    ev = ScriptedEvaluator(by_block)
    s = Search(cfg, Target(task, task.workload_set("tiny"), "tiny", "cpu"),
               Services(model or OfflineModel(cfg.search.max_new_nodes), ev), run, journal, fork=fork)
    return s, ev, journal


def _run(path: Path, fork=None, **over):
    s, ev, j = _search(path, fork=fork, **over)
    try:
        return s.run(), ev
    finally:
        j.close()


def _records(path: Path, kind):
    return R.of_kind(read_records(path / "journal.jsonl")[0], kind)


def test_finished_run_extended_with_more_rounds_then_replayed_exactly(tmp_path):
    run = tmp_path / "r"
    out4, ev = _run(run, search={"max_rounds": 4})
    assert out4.stop_reason == "round budget used" and len(ev.calls) == 4
    out8, ev = _run(run, search={"max_rounds": 8})
    assert len(ev.calls) == 4                    # only the new rounds were evaluated
    changes = _records(run, R.ConfigChange)
    assert len(changes) == 1 and changes[0].changed == {"search.max_rounds": [4, 8]}
    assert [r.stop for r in _records(run, R.RunEnd)] == ["round budget used"] * 2
    assert len(_records(run, R.Evaluation)) == 8
    size = (run / "journal.jsonl").stat().st_size
    again, ev = _run(run, search={"max_rounds": 8})  # both segments replay under their own settings
    assert ev.calls == [] and (run / "journal.jsonl").stat().st_size == size
    assert again.best.solution_id == out8.best.solution_id and again.evaluations == 8


def test_model_budget_ends_the_run_cleanly_and_a_larger_budget_continues(tmp_path):
    run = tmp_path / "b"
    out, ev = _run(run, search={"max_rounds": 10}, llm={"max_requests": 4})
    assert out.stop_reason.startswith("model budget spent: 4 requests")
    assert out.spend.requests == 4
    first = len(ev.calls)
    out2, ev2 = _run(run, search={"max_rounds": 10}, llm={"max_requests": None})
    assert out2.stop_reason == "round budget used" and first + len(ev2.calls) == 10
    assert out2.spend.requests > 4


def test_resume_refuses_to_change_what_measurements_mean(tmp_path):
    run = tmp_path / "c"
    cfg = compose_config([f"run.dir={run}", "run.live=false", "search.max_rounds=1", "eval.device=cpu"])
    execute(cfg, run, fresh=True)
    from ksearch.cli.app import load_saved_config
    changed = load_saved_config(run, ["eval.workloads=full"])
    with pytest.raises(ConfigError, match="eval.workloads"):
        execute(changed, run, fresh=False)


def test_fork_starts_from_the_path_to_a_node_with_its_kernels(tmp_path):
    src = tmp_path / "src"
    out, _ = _run(src, search={"max_rounds": 6})
    closed = [n for n in out.world_model.closed_nodes() if out.world_model.depth(n.node_id) >= 2]
    target = closed[0] if closed else out.world_model.closed_nodes()[0]
    seed = load_fork(src, target.node_id)
    path_ids = [n.node_id for n in out.world_model.path(target.node_id)]
    assert [n["node_id"] for n in seed.tree["nodes"]] == path_ids
    forked, ev = _run(tmp_path / "fork", fork=seed, search={"max_rounds": 3})
    fork_rec = _records(tmp_path / "fork", R.Fork)[0]
    assert fork_rec.measurements == "carried over" and fork_rec.node == target.node_id
    for nid in path_ids:                          # the path is there, with its kernels
        assert nid in forked.world_model
    assert all(forked.world_model.node(n.node_id).parent_id in (None, *[x.node_id for x in forked.world_model.nodes()])
               for n in forked.world_model.nodes())
    best_on_path = max(n.solution.score for n in out.world_model.path(target.node_id) if n.solution)
    assert forked.best.score >= best_on_path
    assert len(ev.calls) == 3                     # new rounds only; the path was not re-measured


def test_fork_errors_name_the_fix(tmp_path):
    src = tmp_path / "src"
    _run(src, search={"max_rounds": 2})
    with pytest.raises(ValueError, match="fork.node=nope is not a node"):
        load_fork(src, "nope")
    with pytest.raises(ConfigError, match="fork.from"):
        execute(compose_config([f"run.dir={tmp_path / 'x'}", "fork.node=root"]), tmp_path / "x", fresh=True)


def test_torn_last_line_is_dropped_and_a_damaged_middle_is_an_error(tmp_path):
    run = tmp_path / "t"
    _run(run, search={"max_rounds": 3})
    path = run / "journal.jsonl"
    good = path.read_bytes()
    path.write_bytes(good + b'{"seq": 99, "kind": "evalu')          # a crash mid-append
    s, ev, j = _search(run, search={"max_rounds": 3})
    assert j.dropped_bytes > 0
    messages = []
    s.progress.message = messages.append
    s.run()
    j.close()
    assert path.read_bytes() == good and ev.calls == [] and any("torn" in m for m in messages)
    lines = good.split(b"\n")
    lines[3] = b"garbage"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(JournalCorrupted, match="line 4"):
        read_records(path)


def test_a_model_failure_stops_the_run_keeps_its_cost_and_resume_continues(tmp_path):
    from ksearch.llm.base import ModelError
    run = tmp_path / "f"
    s, ev, j = _search(run, model=FlakyModel(3), search={"max_rounds": 4})
    with pytest.raises(ModelError):
        s.run()
    j.close()
    failed = _records(run, R.ModelFailed)
    assert len(failed) == 1 and failed[0].usage["cost_usd"] == 0.25
    out, _ = _run(run, search={"max_rounds": 4})
    assert out.evaluations == 4 and out.spend.cost_usd == pytest.approx(0.25)
