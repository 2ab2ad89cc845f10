"""Every bad input at the command line is one line that says what to do, exit code 2, no traceback,
and no half-made run folder."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ksearch.cli.app import ConfigError, compose_config, execute
from ksearch.cli.main import main, parse_args
from ksearch.config import Config
from ksearch.config_validate import CHECKED_ELSEWHERE, RULES, leaf_keys, violations

ROOT = Path(__file__).resolve().parent.parent


def _one_line_error(capsys) -> str:
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert "Traceback" not in text, text
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("error:")), None)
    assert start is not None and len(lines) - start <= 2, text      # the error is last; rich may wrap it once
    assert all(line.startswith("run directory:") for line in lines[:start]), text
    return "\n".join(lines[start:])


def test_every_config_field_has_a_check():
    """Each setting is a choice (an Enum; a bool), has a check with its field in ksearch/config.py, or is
    checked against the machine in config_validate.RULES; RULES names only settings that exist."""
    import dataclasses
    import typing
    from enum import Enum

    unchecked, fields = [], set(leaf_keys(OmegaConf.to_container(OmegaConf.structured(Config))))

    def walk(cls, prefix):
        for f in dataclasses.fields(cls):
            key, kind = prefix + f.name, typing.get_type_hints(cls)[f.name]
            kind = next((a for a in typing.get_args(kind) if a is not type(None)), kind)
            if dataclasses.is_dataclass(kind):
                walk(kind, key + ".")
            elif key in fields and not (isinstance(kind, type) and issubclass(kind, (Enum, bool))) \
                    and "check" not in f.metadata and key not in RULES:
                unchecked.append(key)

    walk(Config, "")
    assert not unchecked, f"give these a check in ksearch/config.py (setting(default, check)): {unchecked}"
    assert not sorted(set(RULES) - fields), "rules for settings that do not exist"
    assert CHECKED_ELSEWHERE == {"fork"}


def test_the_defaults_break_no_rule():
    from ksearch.config import problems

    cfg = compose_config([])
    assert problems(cfg) == [] and violations(OmegaConf.to_container(cfg)) == []


@pytest.mark.parametrize("override,needle", [
    ("search.max_rounds=-1", "search.max_rounds=-1: must be a positive integer"),
    ("search.max_rounds=0", "search.max_rounds=0: must be a positive integer"),
    ("eval.trials=-5", "eval.trials=-5: must be a positive integer"),
    ("eval.timeout_s=-1", "eval.timeout_s=-1.0: must be positive"),
    ("search.policy=bogus", "learned | greedy | random"),
    ("search.language=rust", "triton | cuda"),
    ("llm.kind=magic", "offline | litellm"),
    ("eval.device=tpu", "auto | cpu | cuda | cuda:N"),
    ("eval.metric=fastest", "eval.metric=fastest: must be one of gpu_time | call_latency"),
    ("llm.reasoning_effort=huge", "llm.reasoning_effort=huge: must be one of minimal | low | medium | high"),
    ("llm.max_tokens=lots", "llm.max_tokens=lots: must be an integer"),     # an optional setting: `int | None`
    ("search.max_rounds=many", "search.max_rounds=many: must be an integer"),
    ("run.live=maybe", "run.live=maybe: must be true or false"),
    ("eval.pool=slurm", "local | ray"),
    ("logger=tensorboard", "none | wandb | mlflow"),
    ("search.max_difficulty=9", "must be <= 5"),
    ("search.parallel=0", "positive integer"),
    ("search.seed_solution=/no/such/kernel.py", "/no/such/kernel.py does not exist"),
    ("task.dir=/no/such/folder", "not an existing folder"),
    ("+search.max_roundz=3", "search.max_roundz: not a setting"),
    ("+eval.bogus=1", "eval.bogus: not a setting"),
    ("llm=llm_schema", "llm=llm_schema: no such llm"),
    ("search=search_schema", "search=search_schema: no such search"),
    ("llm=litellm", "needs llm.model"),
])
def test_bad_settings_are_one_line_errors_and_make_no_run(tmp_path, capsys, override, needle):
    run_dir = tmp_path / "run"
    assert main(["run", override, f"run.dir={run_dir}", "search.max_rounds=1"
                 if "max_rounds" not in override else "run.live=false"]) == 2
    assert needle in _one_line_error(capsys)
    assert not run_dir.exists()


def test_schemas_are_not_offered_as_group_options():
    from hydra.core.config_store import ConfigStore

    compose_config([])
    repo = ConfigStore.instance().repo
    for group in ("llm", "search", "eval"):
        assert not any("schema" in name for name in repo.get(group, {})), repo.get(group)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_on_a_cpu_machine_is_a_one_line_error(tmp_path, capsys):
    assert main(["run", "eval.device=cuda", f"run.dir={tmp_path / 'run'}"]) == 2
    assert "no CUDA device" in _one_line_error(capsys)
    assert not (tmp_path / "run").exists()


def test_a_read_only_run_dir_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    from ksearch.store import RunDir

    def refuse(self, config_yaml):          # what mkdir does under a read-only parent (root ignores chmod)
        raise PermissionError(13, "Permission denied", str(self.path))

    monkeypatch.setattr(RunDir, "create", refuse)
    assert main(["run", f"run.dir={tmp_path / 'run'}", "search.max_rounds=1", "run.live=false"]) == 2
    assert "cannot write there (Permission denied)" in _one_line_error(capsys)


def test_a_missing_api_key_fails_before_any_run_exists(tmp_path, monkeypatch):
    pytest.importorskip("litellm")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = compose_config(["llm=litellm", "llm.model=openai/gpt-4o-mini"])
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        execute(cfg, tmp_path / "run", fresh=True)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("content,needle", [
    (b"", "is empty"),
    (b"def run(:\n    pass\n", "does not parse"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00", "binary file"),
    (b'{"hello": 1}', "not a solution"),
    (b'{"name": "x", "definition": "d", "spec": {"language": "rust", "entry_point": "a.rs::run"}, '
     b'"sources": [{"path": "a.rs", "content": "fn"}]}', "spec.language"),
])
def test_eval_of_a_file_that_is_no_solution(tmp_path, capsys, content, needle):
    path = tmp_path / ("k.json" if content.startswith(b"{") else "k.py")
    path.write_bytes(content)
    assert main(["eval", str(path)]) == 2
    assert needle in _one_line_error(capsys)


def test_eval_of_a_missing_file(tmp_path, capsys):
    assert main(["eval", str(tmp_path / "nope.py")]) == 2
    assert "does not exist" in _one_line_error(capsys)


def test_resume_with_another_task_points_to_fork(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(compose_config([])))
    assert main(["resume", str(tmp_path), "task=mla_paged_decode_h16_ckv512_kpe64_ps1"]) == 2
    text = _one_line_error(capsys)
    assert "resume cannot change task" in text and "fork.from=" in text and "Merge error" not in text


def test_bench_help_and_options_anywhere(capsys):
    for flag in ("--help", "-h"):
        with pytest.raises(SystemExit) as e:
            main(["bench", flag])
        assert e.value.code == 0
        assert "--baseline-repeats N" in capsys.readouterr().out
    args = parse_args(["bench", "--families", "task=x", "--out", "f.json", "eval.workloads=tiny",
                       "--baseline-repeats", "3"])
    assert args.families and args.out == "f.json" and args.baseline_repeats == 3
    assert args.overrides == ["task=x", "eval.workloads=tiny"]
    args = parse_args(["eval", "k.py", "--json", "task=x", "eval.trials=2"])
    assert args.json and args.overrides == ["task=x", "eval.trials=2"]
    with pytest.raises(SystemExit) as e:
        parse_args(["bench", "--bogus", "task=x"])
    assert e.value.code == 2


def test_readme_bench_flags_exist(capsys):
    readme = (ROOT / "README.md").read_text()
    line = next(x for x in readme.splitlines() if x.startswith("ksearch bench"))
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    help_text = capsys.readouterr().out
    for flag in (w.strip("[]") for w in line.split("#")[0].split() if w.strip("[]").startswith("--")):
        assert flag in help_text, flag


def test_version_and_python_dash_m(capsys):
    from ksearch import __version__

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and __version__ in capsys.readouterr().out
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "ksearch", "--version"], capture_output=True, text=True, env=env,
                       cwd="/", timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("ksearch ")


def test_compare_finds_the_arms_of_a_sweep_in_a_relative_folder(tmp_path, monkeypatch):
    from ksearch.cli.sweep import plan_sweep
    from ksearch.viz.compare import expand_run_dirs

    monkeypatch.chdir(tmp_path)
    sweep = plan_sweep(["run.seed=0,1"], sweeps_dir=Path("runs/sweeps"))
    assert not sweep.root.is_absolute()
    for arm in sweep.arms:
        Path(arm.run_dir).mkdir(parents=True)
        (Path(arm.run_dir) / "journal.jsonl").write_text("")
    sweep.write()
    found = expand_run_dirs([str(sweep.root)])
    assert [p.resolve() for p in found] == [Path(a.run_dir).resolve() for a in sweep.arms]


@pytest.mark.parametrize("override,expected", [
    ("serach.max_rounds=3", "serach.max_rounds: not a setting of ksearch; did you mean search.max_rounds=3?"),
    ("search.max_round=3", "did you mean search.max_rounds=3?"),
    ("eval.devic=cpu", "did you mean eval.device=cpu?"),
    ("llm=ofline", "llm=ofline: no such llm; did you mean llm=offline?"),
    ("task=gqa_paged", "did you mean task=gqa_paged_decode_h32_kv4_d128_ps1?"),
    ("search=2", "search=2: no such search (options: default)"),
    ("fork=x", "fork: a group of settings, not one; set one of its keys, e.g. fork.from=..."),
    ("zzz=1", "zzz: not a setting of ksearch (ksearch/config.py"),
])
def test_a_misspelt_override_is_named_with_the_nearest_setting(override, expected):
    with pytest.raises(ConfigError) as e:
        compose_config([override])
    assert expected in str(e.value)
    assert "ksearch tasks" not in str(e.value) or override.startswith("task=")


def test_known_overrides_pass_the_hint_check():
    from ksearch.cli.app import conf_dir
    from ksearch.config_hints import first_problem

    assert first_problem(["search.max_rounds=3", "llm=litellm", "task=gqa_paged_decode_h32_kv4_d128_ps1",
                          "fork.from=/x", "+search.extra=1", "eval.device=cpu,cuda", "hydra.verbose=true"],
                         conf_dir()) is None


def test_resume_names_a_misspelt_override_too(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(compose_config([])))
    assert main(["resume", str(tmp_path), "serach.max_rounds=9"]) == 2
    assert "did you mean search.max_rounds=9?" in _one_line_error(capsys)


def test_a_start_that_fails_after_the_folder_was_made_leaves_none(tmp_path, monkeypatch):
    """Whatever fails before the first journal record (here the evaluation pool) takes the folder with it."""
    import ksearch.eval.parent.pool as pool

    def no_pool(*a, **k):
        raise ValueError("eval.pool=ray needs Ray: pip install 'ksearch[ray]' (or eval.pool=local)")

    monkeypatch.setattr(pool, "build_pool", no_pool)
    with pytest.raises(ConfigError, match=r"ksearch\[ray\]"):
        execute(compose_config(["search.max_rounds=1"]), tmp_path / "run", fresh=True)
    assert not (tmp_path / "run").exists()


def test_a_start_that_recorded_something_keeps_its_folder(tmp_path):
    from ksearch.store import RunDir

    run = RunDir(tmp_path / "run")
    run.create("x: 1\n")
    run.journal_path.write_text('{"seq": 0, "kind": "run_start"}\n')
    assert not run.discard_if_empty() and run.config_path.is_file()
    run.journal_path.write_text("")
    assert run.discard_if_empty() and not run.config_path.exists() and not (run.path / "solutions").exists()


def test_bench_self_check_that_disagrees_exits_non_zero(tmp_path, capsys, monkeypatch):
    import ksearch.cli.bench as bench
    from ksearch.task import load_task
    from ksearch.task.catalog import load_catalog

    task = load_task("gqa_paged_decode_h32_kv4_d128_ps1")
    kernel = tmp_path / "k.py"
    kernel.write_text(load_catalog(task.strategies_dir, task.name).render("grouped_heads", {}))
    monkeypatch.setattr(bench, "SELF_CHECK_TOLERANCE", -1.0)     # no two measurements agree this closely
    assert main(["bench", "task=gqa_paged_decode_h32_kv4_d128_ps1", "--solution", str(kernel), "--self-check",
                 "eval.timeout_s=120"]) == 1
    assert "NOT within" in capsys.readouterr().out


@pytest.mark.parametrize("spec,words", [
    ("nofam", ["no family 'nofam'", "token_chunks"]),
    ("token_chunks:NOPE=1", ["no knob 'NOPE'", "MIN_CHUNK"]),
    ("token_chunks:MIN_CHUNK=33", ["MIN_CHUNK='33'", "[16, 32, 64, 128, 256]"]),
    ("token_chunks:MIN_CHUNK", ["KEY=VALUE"]),
])
def test_bench_family_with_bad_knobs_is_one_line_and_exit_2(capsys, spec, words):
    assert main(["bench", "task=gqa_paged_decode_h32_kv4_d128_ps1", "eval.workloads=tiny", "--family", spec]) == 2
    line = _one_line_error(capsys)
    assert all(w in line for w in words), line


def test_bench_family_spec_renders_the_family_at_those_knobs():
    from ksearch.cli.bench import chosen_family_kernels
    from ksearch.task import load_task
    from ksearch.task.catalog import CatalogError, load_catalog

    task = load_task("gqa_paged_decode_h32_kv4_d128_ps1")
    cat = load_catalog(task.strategies_dir, task.name)
    assert cat.parse_spec("token_chunks: CHUNK_ALIGN=TRUE, MIN_CHUNK=32") == (
        "token_chunks", {"CHUNK_ALIGN": True, "MIN_CHUNK": 32})
    assert cat.parse_spec("token_chunks") == ("token_chunks", {})
    [(name, src)] = chosen_family_kernels(cat, ["token_chunks:CHUNK_ALIGN=false"], "cpu")
    assert name == "family token_chunks (CHUNK_ALIGN=False)"      # (CHUNK_ALIGN is on by default)
    assert src == cat.render("token_chunks", {"CHUNK_ALIGN": False}) != cat.render("token_chunks", {})
    prefill = load_task("mla_paged_prefill_causal_h16_ckv512_kpe64_ps1")
    pcat = load_catalog(prefill.strategies_dir, prefill.name)
    cuda = next(f.name for f in pcat.families if not f.runs_on("cpu"))
    with pytest.raises(CatalogError, match="GPU host"):
        chosen_family_kernels(pcat, [cuda], "cpu")


@pytest.mark.parametrize("flags,timed", [([], True), (["--no-reference"], False)])
def test_bench_no_reference_leaves_the_reference_untimed(monkeypatch, flags, timed):
    import ksearch.eval.parent.evaluator as evaluator

    asked: list[bool] = []

    class Stop(Exception):
        pass

    class FakeEvaluator:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def measure_baselines(self, workloads, time_reference=False):
            asked.append(time_reference)
            raise Stop

    monkeypatch.setattr(evaluator, "Evaluator", FakeEvaluator)
    with pytest.raises(Stop):
        main(["bench", "task=gqa_paged_decode_h32_kv4_d128_ps1", "eval.workloads=tiny",
              "--family", "token_chunks", *flags])
    assert asked == [timed]
