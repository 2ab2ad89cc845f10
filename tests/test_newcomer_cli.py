"""What a newcomer trips over, tried as a user does: a fresh `ksearch` process, its stderr, its
exit code. Bad input is one line on stderr saying what to do, exit code 2, no traceback, nothing recorded
lost and no half-made run folder; a run that died says so; nothing waits forever.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.cli_subprocess import ROOT, cli_env, in_terminal, ksearch, one_line_error
from tests.fakes import write_synthetic_run

TASK = "gqa_paged_decode_h32_kv4_d128_ps1"


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---- 5: tracebacks instead of one line -------------------------------------------------------------------------
@pytest.mark.parametrize("command,hint", [
    (["report", "{run}"], "--out DIR"),
    (["report", "{run}", "--html"], "--out DIR"),
    (["export", "{run}"], "--out DIR"),
    (["resume", "{run}", "search.max_rounds=6"], "resume the copy"),
    (["run", "run.dir={run}/inner", "search.max_rounds=1"], "writable run.dir=PATH"),
])
def test_a_read_only_run_directory_is_one_line_and_changes_nothing(real_run, tmp_path, command, hint):
    run = tmp_path / "ro"
    shutil.copytree(real_run, run)
    before = _snapshot(run)
    p = ksearch("tests.readonly_fs", run, *[c.format(run=run) for c in command], prefix=("-m",))
    text = one_line_error(p)
    assert "read-only file system" in text and hint in text and str(run) in text, text
    assert _snapshot(run) == before


def test_bench_of_a_kernel_with_a_syntax_error_is_one_line(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def run(:\n    pass\n")
    text = one_line_error(ksearch("bench", f"task={TASK}", "--solution", bad))
    assert str(bad) in text and "does not parse" in text and "line 1" in text


def _damaged(run: Path) -> Path:
    lines = (run / "journal.jsonl").read_text().splitlines(keepends=True)
    lines[len(lines) // 2] = lines[len(lines) // 2][:40] + "\n"        # damage in the middle, records follow
    (run / "journal.jsonl").write_text("".join(lines))
    return run


def test_tui_on_a_journal_damaged_in_the_middle_exits_with_one_line(real_run, tmp_path):
    run = tmp_path / "damaged"
    shutil.copytree(real_run, run)
    code, shown = in_terminal("tui", _damaged(run))
    assert code == 2, shown[-3000:]
    lines = shown.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "is not a journal record" in lines[0], shown[-3000:]


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_eval_of_a_cuda_kernel_on_a_cpu_is_one_line():
    text = one_line_error(ksearch("eval", "examples/gqa_decode_naive.cu"))
    assert "CUDA kernel" in text and "GPU host" in text


# A kernel whose outputs are wrong and expanded views (stride 0): the candidate's own bookkeeping used to
# fail on them with an internal traceback, and the judge then blamed its own SIGKILL on host memory.
EXPANDED_ZEROS = """import torch

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    b, h, d = q.shape
    return torch.zeros(1, 1, 1, dtype=q.dtype).expand(b, h, d), torch.zeros(1).expand(b, h)
"""
ONE_OUTPUT = """import torch

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    return torch.zeros_like(q)
"""


@pytest.mark.parametrize("source,status,needle", [
    (EXPANDED_ZEROS, "INCORRECT_NUMERICAL", "elements outside"),
    (ONE_OUTPUT, "INCORRECT_SHAPE", "expected 2 outputs"),
])
def test_eval_of_a_kernel_with_wrong_outputs_names_them_without_a_traceback(tmp_path, source, status, needle):
    kernel = tmp_path / "wrong.py"
    kernel.write_text(source)
    p = ksearch("eval", kernel, f"task={TASK}")
    text = p.stdout + p.stderr
    assert p.returncode == 1, text[-3000:]
    assert f"{status} on tiny_" in text and needle in text, text[-3000:]
    assert "Traceback" not in text and "SIGKILL" not in text and "out of host memory" not in text, text[-3000:]


# ---- 6: silence where a user needs a word ----------------------------------------------------------------------
def test_a_failing_seed_solution_is_reported_and_the_final_tree_uses_shows_width(tmp_path):
    """The seed's verdict is said; and piped with no terminal, `run` draws its final tree at the width
    `show` uses, 100 columns (it was 160)."""
    seed = tmp_path / "seed.py"
    seed.write_text(ONE_OUTPUT)
    p = ksearch("run", f"search.seed_solution={seed}", "search.max_rounds=1", f"run.dir={tmp_path / 'run'}",
                "run.live=false", "eval.validate=null")
    assert p.returncode == 0, p.stderr[-3000:]
    line = next((x for x in p.stdout.splitlines() if str(seed) in x), "")
    assert line.startswith("warning: seed solution") and "did not pass" in line and "INCORRECT_SHAPE" in line, \
        p.stdout[-3000:]
    header = next(line for line in p.stdout.splitlines() if line.startswith("node  step"))
    shown = ksearch("show", tmp_path / "run").stdout
    assert len(header) == len(next(line for line in shown.splitlines() if line.startswith("node  step"))) == 100


def test_cuda_with_the_offline_model_is_refused_before_a_run_exists(tmp_path):
    text = one_line_error(ksearch("run", "search.language=cuda", f"run.dir={tmp_path / 'run'}"))
    assert "offline model writes its task's strategy catalog" in text and "llm=litellm" in text
    assert not (tmp_path / "run").exists()


def test_a_misspelt_setting_gets_a_suggestion_on_stderr_and_no_unrelated_hint(tmp_path):
    p = ksearch("run", "serach.max_rounds=3", f"run.dir={tmp_path / 'run'}")
    text = one_line_error(p)
    assert "did you mean search.max_rounds=3?" in text and "ksearch tasks" not in text, text
    assert p.stdout == "" and not (tmp_path / "run").exists()


def test_an_unknown_workload_set_fails_before_a_run_directory_is_named(tmp_path):
    p = ksearch("run", "eval.workloads=nonexistent", f"run.dir={tmp_path / 'run'}")
    assert "eval.workloads=nonexistent" in one_line_error(p)
    assert "run directory" not in p.stdout and not (tmp_path / "run").exists()


def test_a_negative_depth_is_refused(tmp_path):
    run = write_synthetic_run(tmp_path / "toy")
    assert "--depth -1" in one_line_error(ksearch("show", run, "--depth", "-1"))


# ---- 7: dead runs that look alive --------------------------------------------------------------------------------
def _died_at_start(run: Path) -> Path:
    """A run whose first model request failed: config, baseline, the failure, no tree (what an unknown
    provider leaves behind)."""
    run.mkdir(parents=True)
    (run / "solutions").mkdir()
    (run / "config.yaml").write_text(f"task:\n  name: {TASK}\nllm:\n  kind: litellm\n  model: nosuch/m\n")
    records = [
        {"seq": 0, "kind": "run_start", "t": 1.0, "task": TASK, "workload_set": "tiny", "device": "cpu"},
        {"seq": 1, "kind": "baseline", "t": 2.0, "key": "cpu:tiny:0",
         "value": {"device": "cpu", "variants": {"reference": {"w": 1.0}}, "label": "PyTorch reference (CPU)"}},
        {"seq": 2, "kind": "model_failed", "t": 3.0, "key": "k", "purpose": "init",
         "error": "nosuch/m: init request failed: LLM Provider NOT provided"},
    ]
    (run / "journal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / ".lock").write_text(json.dumps({"pid": 999999, "host": "h", "command": "ksearch run", "started": 1.0}))
    return run


def test_show_and_tui_say_a_run_that_died_at_start_is_dead(tmp_path):
    run = _died_at_start(tmp_path / "dead")
    text = one_line_error(ksearch("show", run))
    assert "died before it built its world model" in text and "model request failed" in text
    assert "try again in a moment" not in text
    code, shown = in_terminal("tui", run, timeout=60)
    assert code == 2 and "died before it built its world model" in shown, shown[-3000:]


def test_a_failed_start_leaves_no_run_directory(tmp_path):
    """eval.pool=ray without Ray: refused before the folder exists, and the hint keeps its [ray]."""
    fake = tmp_path / "no_ray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('Ray is not installed here')\n")
    env = cli_env(PYTHONPATH=f"{tmp_path / 'no_ray'}:{ROOT}")
    p = ksearch("run", "eval.pool=ray", f"run.dir={tmp_path / 'run'}", env=env)
    assert "pip install 'ksearch[ray]'" in one_line_error(p)
    assert not (tmp_path / "run").exists()


# ---- 8: tui without a terminal ------------------------------------------------------------------------------------
def test_tui_without_a_terminal_exits_with_one_line(tmp_path):
    run = write_synthetic_run(tmp_path / "toy")
    text = one_line_error(ksearch("tui", run, timeout=60))
    assert "needs a terminal" in text and f"ksearch show {run}" in text


# ---- 4 and 10: widths -------------------------------------------------------------------------------------------
def test_tasks_prints_every_task_name_whole_at_the_width_asked_for():
    from ksearch.task import list_tasks

    for columns in ("80", None):
        env = cli_env(**({"COLUMNS": columns} if columns else {}))
        p = ksearch("tasks", env=env)
        assert p.returncode == 0, p.stderr
        width = int(columns) if columns else 100            # piped, no terminal anywhere: 100, as `show`
        assert max(len(line) for line in p.stdout.splitlines()) <= width
        words = set(p.stdout.replace("│", " ").split())
        assert set(list_tasks()) <= words, p.stdout
