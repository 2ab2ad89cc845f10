"""The search loop with the offline model and a scripted evaluator: cycles, bests, failures, resume."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ksearch.config import Config
from ksearch.llm.offline import OfflineModel, read_plan_header
from ksearch.planner.search import Search, Services, Target
from ksearch.store import Journal, RunDir, read_records
from ksearch.store import records as R
from ksearch.task import load_task
from tests.fakes import TASK, ScriptedEvaluator, by_block


def make_search(tmp_path, judge, crash_at=None, evaluator=None, **search_over):
    # validation (eval.validate) is tested in tests/test_validate.py; these tests count evaluations without it
    cfg = OmegaConf.merge(OmegaConf.structured(Config), {"search": search_over, "eval": {"validate": "none"}})
    task = load_task(TASK)
    run = RunDir(tmp_path / "run")
    if not run.exists():
        run.create(OmegaConf.to_yaml(cfg))
    journal = Journal(run.journal_path, fsync=False)
    ev = evaluator or ScriptedEvaluator(judge, crash_at)
    s = Search(cfg, Target(task, task.workload_set("tiny"), "tiny", "cpu"),
               Services(OfflineModel(cfg.search.max_new_nodes), ev), run, journal)
    return s, ev, journal


def _of(path, kind):
    return R.of_kind(read_records(Path(path))[0], kind)


def test_search_uses_its_round_budget_and_returns_the_global_best(tmp_path):
    s, ev, j = make_search(tmp_path, by_block, max_rounds=8)
    out = s.run()
    j.close()
    assert out.evaluations == 8 == len(ev.calls)
    scores = [r.value["score"] for r in _of(s.run_dir.journal_path, R.Evaluation) if r.value["score"]]
    assert out.best.score == max(scores)
    assert (tmp_path / "run" / "best" / "solution.py").exists()
    assert read_plan_header((tmp_path / "run" / "best" / "solution.py").read_text())["family"] == "split_kv"


def test_cycle_ends_on_stagnation_and_is_capped(tmp_path):
    def flat(plan):
        return "PASSED", 1.0                    # nothing ever improves within a cycle

    s, ev, j = make_search(tmp_path, flat, max_rounds=6, stagnation_window=1, max_rounds_per_cycle=5)
    s.run()
    j.close()
    selects = _of(s.run_dir.journal_path, R.Select)
    assert len(selects) == 3          # attempt 1 passes, attempt 2 does not improve -> 2 rounds per cycle
    s2, ev2, j2 = make_search(tmp_path / "b", by_block, max_rounds=6, stagnation_window=9, max_rounds_per_cycle=2)
    s2.run()
    j2.close()
    assert len(_of(s2.run_dir.journal_path, R.Select)) == 3


def test_failed_cycles_are_counted_and_retire_the_node(tmp_path):
    def broken(plan):
        return ("RUNTIME_ERROR", None) if plan["family"] == "split_kv" else ("PASSED", 0.5)

    s, ev, j = make_search(tmp_path, broken, max_rounds=10, max_failed_cycles=1, max_rounds_per_cycle=2)
    out = s.run()
    j.close()
    node = out.world_model.node("fam_split_kv")
    assert node.failed_cycles == 1 and node.status == "failed"
    assert out.best is not None and out.world_model.path(out.best.node_id)[1].node_id != "fam_split_kv"


def test_seed_is_eligible_as_best(tmp_path):
    seed = tmp_path / "seed.py"
    seed.write_text('# ksearch-plan: {"family": "split_kv", "knobs": {"BLOCK_N": 999}}\ndef run(*a):\n    pass\n')
    def judge(plan):
        return ("PASSED", 50.0) if plan["knobs"].get("BLOCK_N") == 999 else by_block(plan)

    s, ev, j = make_search(tmp_path, judge, max_rounds=3, seed_solution=str(seed))
    out = s.run()
    j.close()
    assert out.best.node_id == "root" and out.best.score == 50.0


def test_resume_after_a_crash_redoes_nothing(tmp_path):
    s, ev, j = make_search(tmp_path / "full", by_block, max_rounds=6)
    s.run()
    j.close()
    full_calls = list(ev.calls)

    s, ev, j = make_search(tmp_path / "cut", by_block, crash_at=4, max_rounds=6)
    with pytest.raises(KeyboardInterrupt):
        s.run()
    j.close()
    first = list(ev.calls)
    assert len(first) == 3
    s, ev, j = make_search(tmp_path / "cut", by_block, max_rounds=6)
    s.run()
    j.close()
    assert first + ev.calls == full_calls          # the same candidates, none evaluated twice
    evals = [r.key for r in _of(tmp_path / "cut" / "run" / "journal.jsonl", R.Evaluation)]
    assert len(evals) == len(set(evals)) == 6


@pytest.mark.slow
def test_cli_run_killed_in_round_three_then_resumed(tmp_path):
    """The product check: SIGKILL during round 3, `ksearch resume`, same evaluation count, none twice."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    run_dir = tmp_path / "killed"
    cmd = [sys.executable, "-m", "ksearch.cli.main"]
    proc = subprocess.Popen(cmd + ["run", f"run.dir={run_dir}", "search.max_rounds=4", "eval.validate=none"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    journal = run_dir / "journal.jsonl"
    deadline = time.time() + 240
    while time.time() < deadline:
        if len(_of(journal, R.Evaluation)) >= 2:
            break
        time.sleep(0.2)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = len(_of(journal, R.Evaluation))
    assert before == 2
    done = subprocess.run(cmd + ["resume", str(run_dir)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    keys = [r.key for r in _of(journal, R.Evaluation)]
    assert len(keys) == 4 and len(set(keys)) == 4
    assert (run_dir / "best" / "solution.py").exists()
    shown = subprocess.run(cmd + ["show", str(run_dir)], env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "best" in shown.stdout
