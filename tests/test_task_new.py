"""`ksearch task new`: a FlashInfer-Bench definition becomes a task the offline model can search at once."""

import json
from pathlib import Path

import pytest
import torch

from ksearch.cli import main
from ksearch.task import load_task
from ksearch.task.catalog import load_catalog

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "rmsnorm.json"

SCALE_ROWS = {
    "name": "scale_rows_d64", "op_type": "custom_scale",
    "axes": {"n": {"type": "var"}, "d": {"type": "const", "value": 64}, "k": {"type": "var"}},
    "inputs": {"x": {"shape": ["n", "d"], "dtype": "float16"}, "idx": {"shape": ["k"], "dtype": "int64"},
               "alpha": {"shape": None, "dtype": "float32"}},
    "outputs": {"y": {"shape": ["k", "d"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(x, idx, alpha):\n    return x[idx].float() * alpha\n",
}


@pytest.fixture
def rmsnorm_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KSEARCH_TASKS_DIR", str(tmp_path / "mine"))
    assert main(["task", "new", str(EXAMPLE), "--dir", str(tmp_path / "mine")]) == 0
    out = capsys.readouterr().out
    assert "task rmsnorm_h4096 written" in out and "starter catalog: rmsnorm" in out
    return tmp_path / "mine" / "rmsnorm_h4096"


def test_the_folder_has_every_part_of_a_task(rmsnorm_dir):
    names = {p.name for p in rmsnorm_dir.iterdir()}
    assert {"definition.json", "reference.py", "workloads.py", "task.yaml", "baseline.py", "strategies"} <= names
    task = load_task("rmsnorm_h4096")
    assert task.dir == rmsnorm_dir
    sets = task.workload_sets()
    assert sorted(sets) == ["feedback", "full", "tiny"]
    assert [w.axes["batch_size"] for w in sets["tiny"]] == [1, 3, 7]
    assert task.baselines() == {}                      # the hook is there, empty: the reference is the baseline
    inputs = task.make_inputs(sets["tiny"][1], device="cpu", seed=3)
    assert list(inputs) == ["hidden_states", "weight"]
    assert inputs["hidden_states"].shape == (3, 4096) and inputs["hidden_states"].dtype == torch.bfloat16
    again = task.make_inputs(sets["tiny"][1], device="cpu", seed=3)
    assert torch.equal(inputs["hidden_states"], again["hidden_states"])


@pytest.mark.parametrize("family", ["chunked_rows", "single_pass"])
def test_each_starter_family_passes_ksearch_eval(rmsnorm_dir, tmp_path, capsys, family):
    cat = load_catalog(rmsnorm_dir / "strategies", "rmsnorm_h4096")
    fam = cat.family(family)
    knobs = {k: v.values[-1] for k, v in fam.knobs.items()}      # the extreme values, not just defaults
    kernel = tmp_path / f"{family}.py"
    kernel.write_text(cat.render(family, knobs))
    assert main(["eval", str(kernel), "task=rmsnorm_h4096", "eval.timeout_s=300"]) == 0
    assert "PASSED" in capsys.readouterr().out


def test_task_dir_setting_adds_the_folder(rmsnorm_dir, monkeypatch):
    from ksearch.app import compose_config

    monkeypatch.delenv("KSEARCH_TASKS_DIR")
    cfg = compose_config([f"task.dir={rmsnorm_dir.parent}", "task=rmsnorm_h4096"])
    assert cfg.task.name == "rmsnorm_h4096" and cfg.task.dir == str(rmsnorm_dir.parent)


def test_an_op_without_a_starter_says_to_use_an_llm(tmp_path, capsys, monkeypatch):
    definition = tmp_path / "scale.json"
    definition.write_text(json.dumps(SCALE_ROWS))
    assert main(["task", "new", str(definition), "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no starter catalog" in out and "llm=litellm" in out and "SCALARS" in out
    assert "warning" not in out                     # the reference ran on the generated inputs
    task = load_task("scale_rows_d64", tmp_path)
    w = task.workload_set("tiny")[2]
    inputs = task.make_inputs(w, device="cpu", seed=0)
    assert int(inputs["idx"].max()) < min(w.axes.values())         # index inputs stay inside every axis
    assert inputs["alpha"] == 1.0
    assert not (tmp_path / "scale_rows_d64" / "strategies").exists()
    assert main(["task", "new", str(definition), "--dir", str(tmp_path)]) == 2       # exists: --force replaces
    assert "--force" in capsys.readouterr().out
    assert main(["task", "new", str(definition), "--dir", str(tmp_path), "--force"]) == 0


@pytest.mark.parametrize("doc,needle", [
    ("not json", "not valid JSON"),
    (json.dumps({**SCALE_ROWS, "reference": "def nope(): pass"}), "function `run`"),
    (json.dumps({k: v for k, v in SCALE_ROWS.items() if k != "axes"}), "axes"),
    (json.dumps({**SCALE_ROWS, "name": "../evil"}), "plain identifier"),
])
def test_a_bad_definition_is_a_one_line_error(tmp_path, capsys, doc, needle):
    path = tmp_path / "d.json"
    path.write_text(doc)
    assert main(["task", "new", str(path), "--dir", str(tmp_path / "out")]) == 2
    out = capsys.readouterr().out
    assert needle in out and "Traceback" not in out


@pytest.mark.slow
def test_the_offline_model_finds_a_passing_kernel(rmsnorm_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["run", "task=rmsnorm_h4096", f"run.dir={run}", "search.max_rounds=4", "run.live=false"]) == 0
    assert "best:" in capsys.readouterr().out
    report = json.loads((run / "best" / "report.json").read_text())
    assert report["status"] == "PASSED"


@pytest.mark.parametrize("edit,needle", [
    (lambda t: t.replace("default: 1024", "default: 999"), "default 999 not in values"),
    (lambda t: t.replace("set: {NUM_WARPS: 16}", "set: {NUM_WARPS: 3}"), "not a listed knob value"),
    (lambda t: t.replace("rating: 7.0", "rating: 70"), "rating"),
    (lambda t: t.replace("template: single_pass.py.j2", "template: missing.py.j2"), "missing.py.j2 not found"),
    (lambda t: t.replace("    template: chunked_rows.py.j2", "    templat: chunked_rows.py.j2"), "templat"),
])
def test_a_broken_catalog_names_what_is_wrong(rmsnorm_dir, edit, needle):
    from ksearch.task.catalog import CatalogError

    path = rmsnorm_dir / "strategies" / "catalog.yaml"
    path.write_text(edit(path.read_text()))
    with pytest.raises(CatalogError, match=needle):
        load_catalog(path.parent, "rmsnorm_h4096")


def test_ksearch_tasks_dir_takes_several_folders_before_the_bundled_tasks(tmp_path, monkeypatch, capsys):
    import os

    from ksearch.task import list_tasks, task_roots, tasks_dir

    a, b = tmp_path / "a", tmp_path / "b"
    definition = tmp_path / "scale.json"
    definition.write_text(json.dumps(SCALE_ROWS))
    assert main(["task", "new", str(EXAMPLE), "--dir", str(a)]) == 0
    assert main(["task", "new", str(definition), "--dir", str(b)]) == 0
    monkeypatch.setenv("KSEARCH_TASKS_DIR", os.pathsep.join([str(a), str(b)]))
    assert task_roots()[:2] == [a.resolve(), b.resolve()] and task_roots()[-1] == tasks_dir()
    names = list_tasks()
    assert {"rmsnorm_h4096", "scale_rows_d64", "gqa_paged_decode_h32_kv4_d128_ps1"} <= set(names)
    capsys.readouterr()
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "rmsnorm_h4096" in out and "scale_rows_d64" in out
