"""`ksearch task new`: a FlashInfer-Bench definition becomes a task the offline model can search at once."""

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
import torch

from ksearch.cli.main import main
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


@pytest.fixture(scope="module")
def rmsnorm_written(tmp_path_factory):
    """`ksearch task new` once per module (it runs every starter kernel to check it, seconds each time)."""
    root = tmp_path_factory.mktemp("task_new") / "mine"
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.setenv("KSEARCH_TASKS_DIR", str(root))
        assert main(["task", "new", str(EXAMPLE), "--dir", str(root)]) == 0
    assert "task rmsnorm_h4096 written" in out.getvalue() and "starter catalog: rmsnorm" in out.getvalue()
    return root / "rmsnorm_h4096"


@pytest.fixture
def rmsnorm_dir(rmsnorm_written, tmp_path, monkeypatch):
    """A private copy of the written task, in its own tasks folder (tests edit it)."""
    mine = tmp_path / "mine"
    shutil.copytree(rmsnorm_written.parent, mine)
    monkeypatch.setenv("KSEARCH_TASKS_DIR", str(mine))
    return mine / "rmsnorm_h4096"


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
    from ksearch.cli.app import compose_config

    monkeypatch.delenv("KSEARCH_TASKS_DIR")
    cfg = compose_config([f"task.dir={rmsnorm_dir.parent}", "task=rmsnorm_h4096"])
    assert cfg.task.name == "rmsnorm_h4096" and cfg.task.dir == str(rmsnorm_dir.parent)


def test_an_op_without_a_starter_says_to_use_an_llm(tmp_path, capsys, monkeypatch):
    definition = tmp_path / "scale.json"
    definition.write_text(json.dumps(SCALE_ROWS))
    assert main(["task", "new", str(definition), "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "no starter catalog for op type 'custom_scale' (starters exist for op types: rmsnorm)" in out
    assert "llm=litellm" in out and "SCALARS" in out
    assert "warning" not in out                     # the reference ran on the generated inputs
    task = load_task("scale_rows_d64", tmp_path)
    w = task.workload_set("tiny")[2]
    inputs = task.make_inputs(w, device="cpu", seed=0)
    assert int(inputs["idx"].max()) < min(w.axes.values())         # index inputs stay inside every axis
    assert inputs["alpha"] == 1.0
    assert not (tmp_path / "scale_rows_d64" / "strategies").exists()
    assert main(["task", "new", str(definition), "--dir", str(tmp_path)]) == 2       # exists: --force replaces
    assert "--force" in capsys.readouterr().err
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
    out = capsys.readouterr().err
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
    (lambda t: t.replace("        doc: elements per chunk", "        name: BLOCK_W"), "a knob's name is its key"),
    (lambda t: "task: other\n" + t, "task: Extra inputs are not permitted"),
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


def _rmsnorm_written_differently(name: str, eps: str = "1e-6") -> dict:
    """examples/rmsnorm.json with the same name, op type, axes, inputs and outputs, and a reference spelt
    otherwise: other variable names, the epsilon inline, no assignment to an `eps` name."""
    doc = json.loads(EXAMPLE.read_text())
    doc["name"] = name
    doc["reference"] = ("import torch\n\n\ndef run(hidden_states, weight):\n    h = hidden_states.float()\n"
                        f"    ms = (h * h).mean(-1, keepdim=True)\n    return (h * torch.rsqrt(ms + {eps}) * "
                        "weight.float()).to(torch.bfloat16)\n")
    return doc


def test_a_reference_written_differently_gets_the_starter_checked_by_running_it(tmp_path):
    """`ksearch task new` as a user runs it, then an offline search of the new task finds a passing kernel."""
    from tests.cli_subprocess import cli_env, ksearch

    definition = tmp_path / "mine.json"
    definition.write_text(json.dumps(_rmsnorm_written_differently("rmsnorm_other_h4096")))
    p = ksearch("task", "new", definition, "--dir", tmp_path / "tasks")
    assert p.returncode == 0, p.stderr
    assert "starter catalog: rmsnorm" in p.stdout and "checked against the reference" in p.stdout, p.stdout
    assert "no starter catalog" not in p.stdout
    assert (tmp_path / "tasks" / "rmsnorm_other_h4096" / "strategies" / "catalog.yaml").is_file()
    run = ksearch("run", "task=rmsnorm_other_h4096", f"run.dir={tmp_path / 'run'}", "search.max_rounds=1",
                  "run.live=false", "eval.validate=null", env=cli_env(KSEARCH_TASKS_DIR=str(tmp_path / "tasks")))
    assert run.returncode == 0 and "best:" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]


def test_a_starter_whose_kernels_miss_the_reference_is_not_written_and_the_note_says_why(tmp_path, capsys):
    definition = tmp_path / "big_eps.json"
    definition.write_text(json.dumps(_rmsnorm_written_differently("rmsnorm_big_eps_h4096", eps="0.5")))
    assert main(["task", "new", str(definition), "--dir", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "has a starter (rmsnorm) whose signature fits, but its kernels do not reproduce this reference" in out
    assert "INCORRECT_NUMERICAL" in out and "llm=litellm" in out
    assert not (tmp_path / "rmsnorm_big_eps_h4096" / "strategies").exists()


def test_a_signature_the_starter_does_not_take_is_named(tmp_path, capsys):
    doc = json.loads(EXAMPLE.read_text())
    doc["name"] = "rmsnorm_two_out"
    doc["outputs"]["rstd"] = {"shape": ["batch_size"], "dtype": "float32"}
    doc["reference"] = doc["reference"].replace("return y.to(hidden_states.dtype)",
                                                "return y.to(hidden_states.dtype), inv_rms[:, 0]")
    definition = tmp_path / "two.json"
    definition.write_text(json.dumps(doc))
    assert main(["task", "new", str(definition), "--dir", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "has a starter (rmsnorm), but it does not fit this definition" in out and "2 output(s)" in out
    assert "(ksearch has one for: rmsnorm)" not in out


def test_eps_candidates_come_from_the_reference_however_it_is_spelt():
    from ksearch.task.starter_match import eps_candidates

    assert eps_candidates("y = x * torch.rsqrt(v + 1e-05)")[0] == "1e-05"
    assert eps_candidates("EPSILON = 0.000001\nz = x + EPSILON")[0] == "0.000001"
    assert eps_candidates("no constant here") == ["1e-6", "1e-5"]
    assert eps_candidates("v + 1e-6 and 3.0 and 1e-5") == ["1e-6", "1e-5"]
