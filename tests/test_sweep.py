"""Sweeps: Hydra's splitting of values, the cartesian product, one folder per arm, failures recorded and
passed over, sweep.json, and one real two-arm sweep through the command line."""

import json
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from ksearch.cli.main import main
from ksearch.cli.sweep import SweepError, parse_sweep, plan_sweep, run_sweep
from ksearch.config import Config


def test_values_are_split_by_hydras_grammar():
    fixed, axes, root = parse_sweep(['task=a,b', 'x="p,q",r', 'run.seed=range(0,3)', 'search.max_rounds=3',
                                     'y=[1,2]', 'run.dir=/tmp/sw'])
    assert fixed == ["search.max_rounds=3", "y=[1,2]"] and root == "/tmp/sw"
    assert [(a.key, a.values) for a in axes] == [("task", ["a", "b"]), ("x", ['"p,q"', "r"]),
                                                ("run.seed", ["0", "1", "2"])]


@pytest.mark.parametrize("overrides,needle", [
    (["run.dir=a,b"], "run.dir cannot be swept"),
    (["x=interval(0,1)"], "list the values"),
    (["x=1,2", "x=3,4"], "swept twice"),
    (["x=("], "x=("),
])
def test_sweeps_that_cannot_run_say_why(overrides, needle):
    with pytest.raises(SweepError, match=needle.replace("(", r"\(")):
        parse_sweep(overrides)


def test_plan_is_the_cartesian_product_in_folders_under_the_root(tmp_path):
    sweep = plan_sweep(["task=a,b", "llm=offline,litellm", "run.seed=0,1,2", "search.max_rounds=2"],
                       root=tmp_path / "sw")
    assert len(sweep.arms) == 12 and len({a.name for a in sweep.arms}) == 12
    first, second, last = sweep.arms[0], sweep.arms[1], sweep.arms[-1]
    assert first.params == {"task": "a", "llm": "offline", "run.seed": "0"}
    assert second.params["run.seed"] == "1"                      # the last axis varies fastest
    assert last.params == {"task": "b", "llm": "litellm", "run.seed": "2"}
    assert first.name == "00_task-a_llm-offline_seed-0" and last.name.startswith("11_")
    assert all(a.overrides[0] == "search.max_rounds=2" for a in sweep.arms)    # same budget everywhere
    assert all(a.run_dir == str(tmp_path / "sw" / a.name) for a in sweep.arms)


def test_default_root_is_under_runs_sweeps(tmp_path):
    sweep = plan_sweep(["run.seed=0,1"], sweeps_dir=tmp_path / "runs" / "sweeps")
    assert sweep.root.parent == tmp_path / "runs" / "sweeps" and len(sweep.arms) == 2


def _fake_compose(overrides):
    cfg = OmegaConf.structured(Config)
    return OmegaConf.merge(cfg, OmegaConf.from_dotlist([o for o in overrides if "=" in o]))


def test_a_failing_arm_is_recorded_and_the_sweep_goes_on(tmp_path):
    ran, stopped = [], []

    def execute(cfg, run_path, *, fresh, progress):
        assert fresh and str(run_path) == cfg.run.dir
        ran.append(cfg.run.seed)
        if cfg.run.seed == 1:
            raise RuntimeError("the model went away")
        best = SimpleNamespace(score=1.0 + cfg.run.seed)
        return SimpleNamespace(best=best, stop_reason="round budget used", evaluations=3)

    class Sink:
        def stop(self, status):
            stopped.append(status)

    logs = []
    sweep = plan_sweep(["run.seed=0,1,2", "search.max_rounds=5"], root=tmp_path / "sw")
    run_sweep(sweep, compose=_fake_compose, execute=execute, make_progress=lambda *a: Sink(), log=logs.append)
    assert ran == [0, 1, 2] and stopped == ["finished", "failed", "finished"]
    data = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert [a["status"] for a in data["arms"]] == ["done", "failed", "done"]
    assert "the model went away" in data["arms"][1]["error"] and data["arms"][2]["best_score"] == 3.0
    assert data["axes"] == {"run.seed": ["0", "1", "2"]}
    assert all(a["budget"]["search.max_rounds"] == 5 for a in data["arms"])
    assert any("arm 1 failed" in line for line in logs)
    assert [a.index for a in sweep.failed()] == [1]


def test_an_interrupt_stops_the_sweep_and_keeps_its_record(tmp_path):
    def execute(cfg, run_path, *, fresh, progress):
        if cfg.run.seed == 1:
            raise KeyboardInterrupt
        return SimpleNamespace(best=None, stop_reason="done", evaluations=0)

    sweep = plan_sweep(["run.seed=0,1,2"], root=tmp_path / "sw")
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, compose=_fake_compose, execute=execute, log=lambda s: None)
    data = json.loads((tmp_path / "sw" / "sweep.json").read_text())
    assert [a["status"] for a in data["arms"]] == ["done", "interrupted", "pending"]


def test_a_config_error_stops_the_sweep_before_any_arm_runs(tmp_path):
    def compose(overrides):
        if "run.seed=2" in overrides:
            raise ValueError("no such key")
        return _fake_compose(overrides)

    def execute(*a, **k):
        raise AssertionError("no arm may run")

    with pytest.raises(ValueError, match="no such key"):
        run_sweep(plan_sweep(["run.seed=0,1,2"], root=tmp_path / "sw"), compose=compose, execute=execute)


def test_sweeping_a_budget_is_said_aloud(tmp_path):
    logs = []
    sweep = plan_sweep(["search.max_rounds=1,2"], root=tmp_path / "sw")
    run_sweep(sweep, compose=_fake_compose, log=logs.append,
              execute=lambda cfg, p, **k: SimpleNamespace(best=None, stop_reason="x", evaluations=0))
    assert any("do not have the same budget" in line for line in logs)


def test_an_existing_sweep_is_not_overwritten(tmp_path):
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "sweep.json").write_text("{}")
    with pytest.raises(FileExistsError, match="already holds a sweep"):
        plan_sweep(["run.seed=0,1"], root=tmp_path / "sw")


def test_several_values_without_m_point_at_m(capsys):
    assert main(["run", "run.seed=0,1"]) == 2
    assert "add -m" in capsys.readouterr().err


def test_a_real_two_arm_sweep(tmp_path, capsys):
    root = tmp_path / "sw"
    assert main(["run", "-m", "search.policy=greedy,learned", "search.max_rounds=1", "run.live=false",
                 f"run.dir={root}"]) == 0
    out = capsys.readouterr().out
    data = json.loads((root / "sweep.json").read_text())
    assert [a["status"] for a in data["arms"]] == ["done", "done"]
    assert [a["name"] for a in data["arms"]] == ["0_policy-greedy", "1_policy-learned"]
    for arm in data["arms"]:
        assert (root / arm["name"] / "journal.jsonl").is_file()
        assert f"dir: {root / arm['name']}" in (root / arm["name"] / "config.yaml").read_text()
    assert "0_policy-greedy" in out and "1_policy-learned" in out and "target score" in out
    assert main(["compare", str(root), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["runs"]
    assert [r["policy"] for r in rows] == ["greedy", "learned"] and all(r["evaluations"] == 1 for r in rows)
