"""Experiment tracking: per-round metrics to wandb or mlflow through fake modules in sys.modules (neither
package is installed here), the error that names the pip package, tee, and the wiring in `ksearch run`."""

import sys
import types

import pytest

from ksearch.cli.main import main
from ksearch.eval.report import EvalReport
from ksearch.viz.tracking import Tee, TrackingError, check_logger, make_tracker, tee
from ksearch.world_model import Action, Node


class FakeWandbRun:
    def __init__(self, **kw):
        self.init, self.logged, self.summary, self.exit_code = kw, [], {}, None

    def log(self, metrics, step=None):
        self.logged.append((step, dict(metrics)))

    def finish(self, exit_code=0):
        self.exit_code = exit_code


@pytest.fixture
def fake_wandb(monkeypatch):
    mod = types.ModuleType("wandb")
    mod.runs = []

    def init(**kw):
        run = FakeWandbRun(**kw)
        mod.runs.append(run)
        return run

    mod.init = init
    monkeypatch.setitem(sys.modules, "wandb", mod)
    return mod


@pytest.fixture
def fake_mlflow(monkeypatch):
    mod = types.ModuleType("mlflow")
    mod.calls = []
    for name in ("start_run", "log_params", "log_metrics", "set_tag", "end_run"):
        setattr(mod, name, (lambda n: lambda *a, **k: mod.calls.append((n, a, k)))(name))
    monkeypatch.setitem(sys.modules, "mlflow", mod)
    return mod


def _passed(score):
    return EvalReport("s", "PASSED", "cpu", score=score, elapsed_s=1.5)


def _drive(tracker):
    node = Node("n1", "root", action=Action(title="t"))
    tracker.round_started(1, 3, node, 1, "action")
    tracker.attempt_done(1, _passed(0.5), 0.5)
    tracker.round_started(2, 3, node, 2, "improve")
    tracker.attempt_done(2, EvalReport("s2", "COMPILE_ERROR", "cpu"), 0.5)
    tracker.summary({"best_score": 0.5, "evaluations": 2, "stop_reason": "round budget used"})
    tracker.stop("finished")


def test_wandb_gets_per_round_metrics(fake_wandb, tmp_path):
    tracker = make_tracker("wandb", {"search": {"max_rounds": 3}}, tmp_path / "task" / "run1", group="sw1")
    _drive(tracker)
    run = fake_wandb.runs[0]
    assert run.init["name"] == "task/run1" and run.init["group"] == "sw1"
    assert run.init["config"] == {"search": {"max_rounds": 3}}
    attempts = [m for _, m in run.logged if "attempt_passed" in m]
    assert attempts[0] == {"round": 1, "attempt_passed": 1.0, "attempt_eval_s": 1.5, "attempt_score": 0.5,
                           "best_score": 0.5, "attempt_status": "PASSED"}
    assert attempts[1]["attempt_status"] == "COMPILE_ERROR" and "attempt_score" not in attempts[1]
    assert [s for s, _ in run.logged] == [1, 1, 2, 2]
    assert run.summary["stop_reason"] == "round budget used" and run.exit_code == 0


def test_mlflow_gets_params_metrics_and_an_end(fake_mlflow, tmp_path):
    tracker = make_tracker("mlflow", {"search": {"max_rounds": 3}, "run": {"seed": 0}}, tmp_path / "r")
    _drive(tracker)
    names = [c[0] for c in fake_mlflow.calls]
    assert names[0] == "start_run" and names[1] == "log_params" and names[-1] == "end_run"
    assert fake_mlflow.calls[1][1][0] == {"search.max_rounds": "3", "run.seed": "0"}
    metrics = [(c[1][0], c[2].get("step")) for c in fake_mlflow.calls if c[0] == "log_metrics"]
    assert ({"round": 1, "attempt_passed": 1.0, "attempt_eval_s": 1.5, "attempt_score": 0.5, "best_score": 0.5},
            1) in metrics
    assert ("set_tag", ("stop_reason", "round budget used"), {}) in fake_mlflow.calls
    assert fake_mlflow.calls[-1][2] == {"status": "FINISHED"}


@pytest.mark.parametrize("logger,package", [("wandb", "pip install wandb"), ("mlflow", "pip install mlflow")])
def test_a_missing_package_is_named(monkeypatch, tmp_path, logger, package):
    monkeypatch.setitem(sys.modules, logger, None)        # makes `import <logger>` fail
    with pytest.raises(TrackingError, match=package):
        make_tracker(logger, {}, tmp_path)
    with pytest.raises(TrackingError, match="logger=none"):
        check_logger(logger)


def test_none_and_unknown_loggers(tmp_path):
    assert make_tracker("none", {}, tmp_path) is None
    with pytest.raises(TrackingError, match="none, wandb, mlflow"):
        make_tracker("tensorboard", {}, tmp_path)


def test_a_tracker_that_breaks_is_switched_off_with_one_warning(fake_wandb, tmp_path):
    warnings = []
    tracker = make_tracker("wandb", {}, tmp_path / "r", warn=warnings.append)

    def broken(*a, **k):
        raise ConnectionError("offline")

    fake_wandb.runs[0].log = broken
    _drive(tracker)            # no exception reaches the search
    assert len(warnings) == 1 and "ConnectionError: offline" in warnings[0]


def test_tee_forwards_to_every_sink_and_stops_all_of_them():
    calls = []

    class Display:
        def round_started(self, *a):
            calls.append(("display", "round", a[0]))

        def attempt_done(self, *a):
            calls.append(("display", "attempt", a[0]))

        def message(self, text):
            calls.append(("display", "message", text))

        def stop(self, status):
            calls.append(("display", "stop", status))
            raise RuntimeError("display broke")

    class Tracker:
        def summary(self, values):
            calls.append(("tracker", "summary", values["x"]))

        def stop(self, status):
            calls.append(("tracker", "stop", status))

    sink = tee(Display(), None, Tracker())
    assert isinstance(sink, Tee) and len(sink.sinks) == 2
    sink.round_started(1, 2, None, 1, "action")
    sink.attempt_done(1, None, None)
    sink.message("hi")
    sink.summary({"x": 1})
    with pytest.raises(RuntimeError, match="display broke"):
        sink.stop("killed")
    assert calls == [("display", "round", 1), ("display", "attempt", 1), ("display", "message", "hi"),
                     ("tracker", "summary", 1), ("display", "stop", "killed"), ("tracker", "stop", "killed")]


def test_run_with_logger_wandb_logs_every_round(fake_wandb, tmp_path):
    assert main(["run", f"run.dir={tmp_path / 'r'}", "search.max_rounds=2", "run.live=false", "logger=wandb"]) == 0
    run = fake_wandb.runs[0]
    steps = sorted({s for s, m in run.logged if "attempt_passed" in m})
    assert steps == [1, 2] and run.exit_code == 0 and "best_score" in run.summary
    assert run.init["config"]["logger"] == "wandb"


def test_run_with_a_missing_logger_fails_before_the_run(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "mlflow", None)
    assert main(["run", f"run.dir={tmp_path / 'r'}", "run.live=false", "logger=mlflow"]) == 2
    assert "pip install mlflow" in capsys.readouterr().err
    assert not (tmp_path / "r" / "journal.jsonl").exists()
