"""Runs recorded by an older ksearch (4b3a7c5, where issue 27 was filed, and 49d329e) still show, resume,
replay and fork.

tests/fixtures/run_4b3a7c5_serial is a 3-round CPU run of `ksearch run ... eval.workloads=tiny` at 4b3a7c5
(one cycle, the held-out gate, no dispatch), its model records cut the same way as below.

tests/fixtures/run_49d329e_serial (3 rounds, one cycle at a time) and run_49d329e_parallel (2 rounds, two
cycles side by side) are real CPU runs of `ksearch run` at commit 49d329e, before the journal's records were
all typed and the run state became one fold over them. Both end with a held-out gate and a shape dispatch.
To keep them small their model records keep only the request's kind and purpose (replay matches answers
by key), and the dispatch's kernel is left out of solutions/ (a resume composes it again).

A fake evaluator stands in for the interpreter (a resume or fork that goes live measures new kernels
with it), so these tests take seconds; a replay must never call it.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from ksearch.cli.main import main
from ksearch.eval.report import BaselineTimes, EvalReport, WorkloadResult
from ksearch.store import load_history, read_records
from ksearch.store import records as R

FIXTURES = Path(__file__).parent / "fixtures"
RUNS = {"serial": FIXTURES / "run_49d329e_serial", "parallel": FIXTURES / "run_49d329e_parallel",
        "issue_27_filed": FIXTURES / "run_4b3a7c5_serial"}


class FakePool:
    """Scores a kernel by a hash of its source: instant and deterministic. Counts what it measured."""

    calls: list[str] = []

    def measure_baselines(self, workloads, time_reference: bool = False):
        FakePool.calls.append("baseline")
        return BaselineTimes("cpu", {"reference": {w.name: 1.0 for w in workloads}}, "fake")

    def evaluate(self, source, solution_id, workloads, baseline):
        FakePool.calls.append(solution_id)
        score = 0.001 + int(hashlib.sha256(source.encode()).hexdigest()[:6], 16) / 2 ** 24 / 100
        r = EvalReport(solution_id, "PASSED", "cpu", [WorkloadResult(w.name, "PASSED", latency_ms=1 / score)
                                                       for w in workloads])
        r.speedups = {w.name: score for w in workloads}
        r.score, r.score_name, r.baseline = score, "geomean_speedup", "fake"
        return r

    confirm = evaluate          # a held-out confirmation is an evaluation here

    def remeasure(self, entries, workloads, baseline):
        return [self.evaluate(src, sid, workloads, baseline) for src, sid in entries]

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def fake_pool(monkeypatch):
    FakePool.calls = []
    monkeypatch.setattr("ksearch.eval.parent.pool.build_pool", lambda *a, **kw: FakePool())
    return FakePool


def _copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(RUNS[name], dst)
    return dst


def _decisions(run: Path) -> list[tuple[str, str]]:
    """What the search decided, in order: selections, bests, attachments, the dispatch."""
    out = []
    for r in read_records(run / "journal.jsonl")[0]:
        if isinstance(r, R.Select):
            out.append(("select", r.node_id))
        elif isinstance(r, (R.BestRecord, R.NotBest)):
            out.append((r.kind, r.solution_id))
        elif isinstance(r, R.Attach):
            out.append(("attach", r.node_id))
        elif isinstance(r, R.Dispatch):
            out.append(("dispatch", str(r.accepted)))
    return out


@pytest.mark.parametrize("name", sorted(RUNS))
def test_show_draws_an_old_run(name, tmp_path, capsys):
    run = _copy(name, tmp_path)
    assert main(["show", str(run), "--width", "100"]) == 0
    out = capsys.readouterr().out
    assert "n1 " in out and "round budget used" in out
    dispatched = any(isinstance(r, R.Dispatch) and r.composed for r in read_records(run / "journal.jsonl")[0])
    assert ("best/ holds a shape dispatch" in out) == dispatched
    assert main(["show", str(run), "--node", "n1", "--width", "100"]) == 0
    history = load_history(run)
    assert history.best is not None and history.stop_reason == "round budget used"
    assert len(history.evaluations) == sum(isinstance(r, R.Evaluation) for r in read_records(run / "journal.jsonl")[0])


@pytest.mark.parametrize("name", sorted(RUNS))
def test_resume_of_an_old_finished_run_replays_it_unchanged(name, tmp_path, fake_pool):
    run = _copy(name, tmp_path)
    before = (run / "journal.jsonl").read_bytes()
    assert main(["resume", str(run)]) == 0
    assert (run / "journal.jsonl").read_bytes() == before
    assert fake_pool.calls == []                        # every answer came from the journal
    assert (run / "best" / "manifest.json").is_file()


@pytest.mark.parametrize("name", sorted(RUNS))
def test_resume_continues_an_old_run_live(name, tmp_path, fake_pool):
    run = _copy(name, tmp_path)
    before = (run / "journal.jsonl").read_bytes()
    rounds = {"serial": 3, "parallel": 2, "issue_27_filed": 3}[name]
    assert main(["resume", str(run), f"search.max_rounds={rounds + 1}"]) == 0
    after = (run / "journal.jsonl").read_bytes()
    assert after.startswith(before) and len(after) > len(before)
    new = read_records(run / "journal.jsonl")[0][before.count(b"\n"):]
    assert isinstance(new[0], R.ConfigChange) and new[0].changed == {"search.max_rounds": [rounds, rounds + 1]}
    assert any(isinstance(r, R.Select) for r in new) and isinstance(new[-2], R.RunEnd)
    assert fake_pool.calls                               # the new round was measured


@pytest.mark.parametrize("name", sorted(RUNS))
def test_replay_of_an_old_run_repeats_its_decisions(name, tmp_path, fake_pool):
    rounds, parallel = {"serial": (3, 1), "parallel": (2, 2), "issue_27_filed": (3, 1)}[name]
    new = tmp_path / "replayed"
    assert main(["run", f"run.dir={new}", f"llm.replay={RUNS[name]}", f"search.max_rounds={rounds}",
                 f"search.parallel={parallel}", "run.live=false"]) == 0
    assert fake_pool.calls == []                        # every measurement came from the recording
    assert _decisions(new) == _decisions(RUNS[name])


@pytest.mark.parametrize("name", sorted(RUNS))
def test_fork_of_an_old_run(name, tmp_path, fake_pool):
    new = tmp_path / "forked"
    assert main(["run", f"run.dir={new}", f"fork.from={RUNS[name]}", "fork.node=n1", "search.max_rounds=1",
                 "run.live=false"]) == 0
    fork = next(r for r in read_records(new / "journal.jsonl")[0] if isinstance(r, R.Fork))
    assert fork.node == load_history(RUNS[name]).world_model().path(fork.node)[-1].node_id
    assert fork.measurements == "carried over" and fork.source == str(RUNS[name])
    assert main(["resume", str(new)]) == 0               # a fork resumes from its own records
