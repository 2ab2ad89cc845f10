"""`ksearch memory show|export|clear` and the memory settings of `ksearch run`: one-line errors, exit 2."""

import csv
import json

import pytest

from ksearch.cli.main import main
from ksearch.knowledge.store import EvaluationRow, KnowledgeStore, default_path
from tests.test_cli_errors import _one_line_error


def fill(path):
    rows = [EvaluationRow("sigA", "gqa_paged", "gqa_task", "cpu", fam, knobs, "all", "PASSED", score, None, run,
                          f"s{i}", i, "tiny")
            for i, (fam, knobs, score, run) in enumerate([("split_kv", {"BLOCK_N": 64}, 0.004, "r1"),
                                                          ("grouped_heads", {"BLOCK_N": 128}, 0.013, "r1"),
                                                          ("grouped_heads", {"BLOCK_N": 32}, 0.009, "r2")])]
    rows.append(EvaluationRow("sigB", "mla_paged", "mla_task", "NVIDIA H200", "split", {}, "all", "RUNTIME_ERROR",
                              None, None, "r3", "s9", 1, "feedback"))
    rows.append(EvaluationRow("sigA", "gqa_paged", "gqa_task", "cpu", "split_kv", {}, "b1", "PASSED", 0.01, None,
                              "r1", "s0", 0, "tiny"))
    with KnowledgeStore(path) as store:
        store.add(rows)


def test_show_a_table_per_task_and_gpu(tmp_path, capsys):
    path = tmp_path / "k.sqlite"
    fill(path)
    assert main(["memory", "show", "--path", str(path)]) == 0
    out = capsys.readouterr().out
    gqa = next(line for line in out.splitlines() if "gqa_task" in line)
    assert [c.strip() for c in gqa.split("│")[1:-1]] == [
        "gqa_task", "cpu", "2", "3", "3", "grouped_heads", "BLOCK_N=128", "0.013x"]
    mla = next(line for line in out.splitlines() if "mla_task" in line)
    assert [c.strip() for c in mla.split("│")[1:-1]] == ["mla_task", "NVIDIA H200", "1", "1", "0", "-", "-", "-"]
    assert main(["memory", "show", "--path", str(path), "--task", "mla_task"]) == 0
    assert "gqa_task" not in capsys.readouterr().out


def test_show_uses_the_default_store_and_says_when_it_is_empty(capsys):
    assert main(["memory", "show"]) == 0
    assert f"the knowledge store {default_path()} holds no evaluations yet" in capsys.readouterr().out.replace("\n", "")
    assert not default_path().exists()                 # showing creates nothing


def test_export_json_and_csv(tmp_path, capsys):
    path = tmp_path / "k.sqlite"
    fill(path)
    assert main(["memory", "export", str(tmp_path / "all.json"), "--path", str(path)]) == 0
    rows = json.loads((tmp_path / "all.json").read_text())
    assert len(rows) == 5 and rows[1]["family"] == "grouped_heads" and rows[1]["knobs"] == {"BLOCK_N": 128}
    assert main(["memory", "export", str(tmp_path / "gqa.csv"), "--task", "gqa_task", "--path", str(path)]) == 0
    with (tmp_path / "gqa.csv").open() as f:
        got = list(csv.DictReader(f))
    assert len(got) == 4 and json.loads(got[1]["knobs"]) == {"BLOCK_N": 128} and got[1]["score"] == "0.013"
    capsys.readouterr()
    assert main(["memory", "export", str(tmp_path / "x.txt"), "--path", str(path)]) == 2
    assert "--format json|csv" in _one_line_error(capsys)


def test_clear_one_task_or_all(tmp_path, capsys):
    path = tmp_path / "k.sqlite"
    fill(path)
    assert main(["memory", "clear", "--task", "gqa_task", "--path", str(path)]) == 0
    assert "removed 4 rows (task gqa_task)" in capsys.readouterr().out
    assert [r.task for r in KnowledgeStore(path).rows()] == ["mla_task"]
    assert main(["memory", "clear", "--task", "nope", "--path", str(path)]) == 2
    assert "--task nope: the knowledge store" in _one_line_error(capsys)
    assert main(["memory", "clear", "--all", "--path", str(path)]) == 0
    assert KnowledgeStore(path).rows() == []


def test_clear_needs_to_be_told_what(capsys):
    with pytest.raises(SystemExit) as e:
        main(["memory", "clear"])
    assert e.value.code == 2 and "one of the arguments --task --all is required" in capsys.readouterr().err


def _under_a_file(tmp_path):
    (tmp_path / "file").write_text("x")
    return tmp_path / "file" / "k.sqlite"


def _not_a_database(tmp_path):
    (tmp_path / "k.sqlite").write_text("no database here " * 50)
    return tmp_path / "k.sqlite"


@pytest.mark.parametrize("make, needle", [(_under_a_file, "cannot open the knowledge store"),
                                          (_not_a_database, "not a usable knowledge store")])
def test_a_store_a_run_cannot_use_is_a_one_line_error_and_makes_no_run(tmp_path, capsys, make, needle):
    bad = make(tmp_path)
    run_dir = tmp_path / "run"
    assert main(["run", f"memory.path={bad}", f"run.dir={run_dir}", "search.max_rounds=1", "run.live=false"]) == 2
    text = _one_line_error(capsys)
    assert needle in text and "memory=off" in text
    assert not run_dir.exists()


def test_policy_arms_runs_every_arm_from_the_same_memory(tmp_path):
    import importlib.util
    from pathlib import Path

    from ksearch.cli.app import compose_config

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "policy_arms.py"
    spec = importlib.util.spec_from_file_location("policy_arms", path)
    arms = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(arms)
    assert compose_config(arms.memory_overrides(None)).memory.enabled is False
    fixed = compose_config(arms.memory_overrides(tmp_path / "k.sqlite")).memory
    assert fixed.enabled and not fixed.write and fixed.path == str(tmp_path / "k.sqlite")
    shared = compose_config(arms.baseline_overrides(tmp_path, [])).eval        # arms share one baseline measurement
    assert shared.baseline_cache == "on" and shared.baseline_cache_path == str(tmp_path / "baselines.sqlite")
    assert arms.baseline_overrides(tmp_path, ["eval.baseline_cache=off"]) == []
