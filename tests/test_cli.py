"""The command line: listing tasks, config errors that say what to do, judging one solution file."""

import pytest

from ksearch.cli.app import ConfigError, compose_config
from ksearch.cli.main import main


def test_tasks_lists_gqa(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "gqa_paged_decode_h32_kv4_d128_ps1" in out and "tiny (3)" in out


def test_defaults_compose_to_gqa_offline_cpu_auto():
    cfg = compose_config([])
    assert cfg.task.name == "gqa_paged_decode_h32_kv4_d128_ps1" and cfg.llm.kind == "offline"
    assert cfg.eval.workloads == "auto" and cfg.search.max_rounds > 0


@pytest.mark.parametrize("override,needle", [
    ("search.max_roundz=3", "max_roundz"),
    ("task=no_such_kernel", "no_such_kernel"),
    ("search.max_rounds=many", "max_rounds"),
])
def test_bad_overrides_are_errors_that_name_the_key(override, needle):
    with pytest.raises(ConfigError, match=needle):
        compose_config([override])


def test_cli_reports_config_errors_with_exit_code_2(capsys):
    assert main(["run", "search.max_roundz=3"]) == 2
    assert "max_roundz" in capsys.readouterr().err


def test_resume_of_a_non_run_says_so(tmp_path, capsys):
    assert main(["resume", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_eval_judges_a_rendered_catalog_kernel(tmp_path, capsys):
    from ksearch.task import load_task
    from ksearch.task.catalog import load_catalog

    task = load_task("gqa_paged_decode_h32_kv4_d128_ps1")
    src = load_catalog(task.strategies_dir, task.name).render("grouped_heads", {})
    path = tmp_path / "kernel.py"
    path.write_text(src)
    assert main(["eval", str(path), "eval.timeout_s=120"]) == 0
    out = capsys.readouterr().out
    assert "PASSED" in out and "PyTorch reference (CPU)" in out


def test_help_lists_the_commands_for_looking_at_runs(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("run", "resume", "show", "report", "compare", "eval", "tasks"):
        assert command in out
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "-m, --multirun" in capsys.readouterr().out


def test_report_and_compare_of_a_non_run_say_so(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
