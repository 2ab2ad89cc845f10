"""FlashInfer-Bench interop both ways: Solution JSON in (eval, seed), Solution JSON + traces out (export)."""

import json
from pathlib import Path

import pytest

from ksearch.cli.main import main
from ksearch.instantiate.solution import Solution
from ksearch.interop.flashinfer_bench import FibSolution, FibTrace, from_fib, solution_from_user_text, to_fib
from ksearch.store import read_records
from ksearch.store import records as R
from ksearch.task.catalog import load_catalog

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "rmsnorm.json"


def test_a_solution_survives_the_round_trip():
    sol = Solution.from_code("t", "def run(x):\n    return x\n", name="k", author="me")
    back = from_fib(json.loads(to_fib(sol).model_dump_json()))
    assert back.main_source == sol.main_source and back.definition == "t" and back.language == "triton"


def test_an_entry_point_not_called_run_is_aliased_and_multi_file_is_refused():
    doc = {"name": "k", "definition": "t", "spec": {"language": "python", "entry_point": "kern.py::forward"},
           "sources": [{"path": "kern.py", "content": "def forward(x):\n    return x\n"}]}
    sol = from_fib(doc)
    assert sol.entry_point == "main.py::run" and "run = forward" in sol.main_source
    namespace: dict = {}
    exec(sol.main_source, namespace)
    assert namespace["run"](3) == 3
    doc["sources"].append({"path": "util.py", "content": ""})
    with pytest.raises(ValueError, match="single-file"):
        from_fib(doc)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A two-round rmsnorm run seeded with a FlashInfer-Bench Solution JSON (its own entry-point name)."""
    import os

    tmp = tmp_path_factory.mktemp("fib")
    old = os.environ.get("KSEARCH_TASKS_DIR")
    os.environ["KSEARCH_TASKS_DIR"] = str(tmp / "tasks")
    try:
        assert main(["task", "new", str(EXAMPLE), "--dir", str(tmp / "tasks")]) == 0
        cat = load_catalog(tmp / "tasks" / "rmsnorm_h4096" / "strategies", "rmsnorm_h4096")
        code = cat.render("chunked_rows", {}).replace("def run(", "def rmsnorm_forward(")
        seed = tmp / "seed_solution.json"
        seed.write_text(json.dumps({
            "name": "my_rmsnorm", "definition": "rmsnorm_h4096", "author": "someone", "description": "",
            "spec": {"language": "triton", "target_hardware": ["H200"], "entry_point": "kernel.py::rmsnorm_forward",
                     "dependencies": ["triton"]},
            "sources": [{"path": "kernel.py", "content": code}]}))
        run = tmp / "run"
        assert main(["run", "task=rmsnorm_h4096", f"run.dir={run}", "search.max_rounds=1", "run.live=false",
                     f"search.seed_solution={seed}"]) == 0
        yield tmp, run, seed
    finally:
        if old is None:
            os.environ.pop("KSEARCH_TASKS_DIR", None)
        else:
            os.environ["KSEARCH_TASKS_DIR"] = old


def test_the_seed_solution_json_was_judged_first(searched):
    _, run, seed = searched
    first = R.of_kind(read_records(run / "journal.jsonl")[0], R.Evaluation)[0]
    assert first.node_id == "root" and first.value["status"] == "PASSED"
    assert solution_from_user_text("rmsnorm_h4096", seed.read_text()).main_source.count("run = rmsnorm_forward") == 1


def test_export_writes_a_solution_and_traces_flashinfer_bench_can_read(searched, capsys):
    tmp, run, _ = searched
    out = tmp / "export"
    assert main(["export", str(run), "--format", "flashinfer-bench", "--out", str(out)]) == 0
    capsys.readouterr()
    solutions = sorted((out / "solutions").glob("*.json"))
    assert solutions
    best = json.loads((run / "best" / "solution.json").read_text())
    docs = {p.stem: FibSolution.model_validate_json(p.read_text()) for p in solutions}
    best_doc = next(d for d in docs.values() if d.sources[0].content == best["sources"][0]["content"])
    assert best_doc.definition == "rmsnorm_h4096" and best_doc.spec.entry_point == "main.py::run"
    assert best_doc.spec.language == "triton" and "best kernel" in best_doc.description
    traces = [FibTrace.model_validate_json(line) for line in
              (out / "traces" / "rmsnorm_h4096.jsonl").read_text().splitlines()]
    assert len(traces) >= 3 and all(t.definition == "rmsnorm_h4096" for t in traces)
    assert {t.solution for t in traces} <= set(docs)
    passed = [t for t in traces if t.evaluation.status == "PASSED"]
    assert passed and all(t.evaluation.performance.latency_ms > 0 for t in passed)
    assert all(t.evaluation.performance.speedup_factor > 0 for t in passed)
    assert all(t.evaluation.correctness.max_absolute_error is not None for t in passed)
    assert {t.workload.axes["batch_size"] for t in traces} == {1, 3, 7}
    assert traces[0].workload.inputs == {"hidden_states": {"type": "random"}, "weight": {"type": "random"}}
    definition = json.loads((out / "definitions" / "rmsnorm_h4096.json").read_text())
    assert definition["name"] == "rmsnorm_h4096" and "def run" in definition["reference"]


def test_eval_takes_the_task_from_an_exported_solution(searched, capsys, monkeypatch):
    tmp, run, _ = searched
    monkeypatch.setenv("KSEARCH_TASKS_DIR", str(tmp / "tasks"))
    exported = next((tmp / "export" / "solutions").glob("*.json"), None) or pytest.skip("export test not run")
    assert main(["eval", str(exported)]) == 0                        # no task=: the Solution names it
    assert "rmsnorm_h4096 / tiny" in capsys.readouterr().out
    assert main(["eval", str(run / "best" / "solution.py")]) == 0    # its solution.json names the task
    assert "rmsnorm_h4096 / tiny" in capsys.readouterr().out
    assert main(["eval", str(exported), "task=gqa_paged_decode_h32_kv4_d128_ps1"]) == 2
    assert "this solution is for task rmsnorm_h4096" in capsys.readouterr().err


def test_export_of_a_run_without_a_passing_kernel_says_so(tmp_path, capsys):
    assert main(["export", str(tmp_path)]) == 2
    assert "error:" in capsys.readouterr().err
    (tmp_path / "journal.jsonl").write_text(json.dumps({"seq": 0, "kind": "run_start", "t": 0.0,
                                                        "task": "t", "workloads": []}) + "\n")
    (tmp_path / "config.yaml").write_text("{}")
    assert main(["export", str(tmp_path)]) == 2
    assert "no passing kernel" in capsys.readouterr().err


def test_a_seed_solution_that_cannot_be_read_is_refused_before_the_run(tmp_path, capsys):
    bad = tmp_path / "two_files.json"
    bad.write_text(json.dumps({"name": "k", "definition": "t", "spec": {"language": "triton",
                               "entry_point": "a.py::run"}, "sources": [{"path": "a.py", "content": "x"},
                                                                        {"path": "b.py", "content": "y"}]}))
    assert main(["run", f"search.seed_solution={bad}", f"run.dir={tmp_path / 'run'}"]) == 2
    assert "single-file" in capsys.readouterr().err and not (tmp_path / "run").exists()
