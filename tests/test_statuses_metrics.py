"""Statuses, clocks and timing methods are str enums with one owner (ksearch.eval.report): records written
as plain strings before still load, and records write the same strings as before."""

import json

import pytest

from ksearch.eval.clocks.gputime import per_call_ms
from ksearch.eval.parent.evaluator import EvalSettings
from ksearch.eval.report import BaselineTimes, EvalReport, Metric, Status, TimingMethod, score_metric

#: An evaluation as journals recorded it before the enums (plain strings everywhere).
OLD_REPORT = {"solution_id": "s1", "status": "INCORRECT_LATE_WRITE", "device": "cuda",
              "workloads": [{"workload": "w1", "status": "PASSED", "latency_ms": 0.5, "timing_method": "cuda_graph"},
                            {"workload": "w2", "status": "INCORRECT_LATE_WRITE", "message": "late"}],
              "score": None, "env": {"metric": "gpu_time"}}


def test_a_report_recorded_as_strings_loads_as_members_and_writes_the_same_strings():
    r = EvalReport.from_json(json.loads(json.dumps(OLD_REPORT)))
    assert r.status is Status.INCORRECT_LATE_WRITE and r.workloads[0].status is Status.PASSED
    assert r.workloads[0].timing_method is TimingMethod.cuda_graph and r.workloads[1].timing_method == ""
    again = json.loads(json.dumps(r.to_json()))
    assert {k: again[k] for k in OLD_REPORT if k != "workloads"} == {k: v for k, v in OLD_REPORT.items()
                                                                      if k != "workloads"}
    assert [w["status"] for w in again["workloads"]] == ["PASSED", "INCORRECT_LATE_WRITE"]
    assert f"{r.status}" == "INCORRECT_LATE_WRITE" and r.summary().startswith("INCORRECT_LATE_WRITE on w2")


def test_a_status_this_version_does_not_know_still_loads():
    r = EvalReport.from_json({**OLD_REPORT, "status": "INCORRECT_FROM_THE_FUTURE"})
    assert r.status == "INCORRECT_FROM_THE_FUTURE" and not r.passed


def test_baselines_recorded_with_a_metric_string_load_as_the_metric():
    b = BaselineTimes.from_json({"device": "cpu", "variants": {"reference": {"w1": 1.0}}, "label": "x",
                                 "metric": "call_latency"})
    assert b.metric is Metric.call_latency and json.loads(json.dumps(b.to_json()))["metric"] == "call_latency"
    assert BaselineTimes.from_json({"device": "cuda", "variants": {}, "label": "x"}).metric is Metric.gpu_time


@pytest.mark.parametrize("device,wanted,used", [
    ("cuda", "gpu_time", Metric.gpu_time), ("cuda:1", "call_latency", Metric.call_latency),
    ("cpu", "gpu_time", Metric.call_latency), ("cpu", Metric.call_latency, Metric.call_latency)])
def test_the_score_uses_the_asked_clock_on_a_gpu_and_call_latency_on_a_cpu(device, wanted, used):
    assert score_metric(device, wanted) is used
    assert EvalSettings(device=device, metric=wanted).metric is used


def test_eval_metric_reaches_the_evaluator(monkeypatch):
    """`eval.metric=call_latency` on a GPU is the clock the evaluator's jobs are given (it was dropped)."""
    from ksearch.cli import app
    from ksearch.task import load_task

    monkeypatch.setattr(app, "check_device", lambda cfg: "cuda")
    task = load_task(app.compose_config([]).task.name)
    for override, metric in ((["eval.metric=call_latency"], Metric.call_latency), ([], Metric.gpu_time)):
        _, _, _, settings = app.resolve_eval(app.compose_config(override), task)
        assert settings.metric is metric


def test_a_time_per_call_is_the_reading_less_what_else_it_held_never_negative():
    assert per_call_ms(12.0, 4, 2.0) == 2.5
    assert per_call_ms(1.0, 4, 2.0) == 0.0
    assert per_call_ms(3.0, 3) == 1.0


def test_a_candidate_may_claim_only_its_own_failures():
    from ksearch.eval.trusted.judge import _claimed

    assert _claimed({"status": "INCORRECT_LATE_WRITE"}, Status.RUNTIME_ERROR) is Status.INCORRECT_LATE_WRITE
    for claim in ("PASSED", "INCORRECT_TIMING", "INCORRECT_TAMPERING", "bogus", ["INCORRECT_SHAPE"], None):
        assert _claimed({"status": claim}, Status.COMPILE_ERROR) is Status.COMPILE_ERROR


def test_a_judgement_and_a_baseline_job_are_told_the_same_clock_and_seed(tmp_path):
    """Both jobs take the fields they share from the evaluator's settings in one place (ksearch.eval.trusted.job)."""
    from dataclasses import fields
    from types import SimpleNamespace

    from ksearch.eval.parent import evaluator
    from ksearch.eval.trusted.job import Job

    jobs = {}

    class Recorder:
        pid = 1

        def alive(self):
            return True

        def request(self, kind, payload, timeout, startup_timeout):
            jobs[kind] = payload
            value = [EvalReport("s", Status.PASSED, "cuda")] if kind == "judge" else None
            return evaluator.Reply("ok", value, "", 0)

        def kill(self):
            pass

    ev = evaluator.Evaluator.__new__(evaluator.Evaluator)
    ev.settings = EvalSettings(device="cuda", metric="call_latency", run_seed=7, warmup=2, trials=4,
                               static_checks=False)
    ev.notify, ev._worker = None, Recorder()
    ev.task = SimpleNamespace(name="t", dir=tmp_path / "t")
    ev.evaluate("def run(): pass\n", "s", [], None)
    ev.measure_baselines([])
    shared = [f.name for f in fields(Job)]
    assert {k: getattr(jobs["judge"], k) for k in shared} == {k: getattr(jobs["baseline"], k) for k in shared}
    assert jobs["judge"].metric is Metric.call_latency and jobs["baseline"].run_seed == 7


def test_a_nodes_status_is_a_member_and_the_views_list_them_in_its_order():
    from ksearch.cli.main import _statuses
    from ksearch.world_model import Action, Node, NodeStatus

    assert Node("a", "root", action=Action("t")).status is NodeStatus.open
    assert Node("a", "root", action=Action("t"), retired=True).status == "failed"
    with pytest.raises(KeyError, match="node statuses are open, closed, failed, pruned, decision"):
        _statuses("open,bogus")
    assert _statuses("closed, open") == {"closed", "open"}


def test_eval_profile_reaches_the_judges_job_and_may_change_on_resume(monkeypatch):
    from ksearch.cli import app
    from ksearch.planner.settings import frozen_changes, settings_diff
    from ksearch.task import load_task

    monkeypatch.setattr(app, "check_device", lambda cfg: "cuda")
    task = load_task(app.compose_config([]).task.name)
    for override, on in (([], True), (["eval.profile=true"], True), (["eval.profile=false"], False)):
        _, _, _, settings = app.resolve_eval(app.compose_config(override), task)
        assert settings.profile is on
    # unset in a run recorded before the setting existed: no change at all; set on resume: allowed
    assert settings_diff(app.compose_config([]), app.compose_config([])) == {}
    diff = settings_diff(app.compose_config([]), app.compose_config(["eval.profile=false"]))
    assert diff == {"eval.profile": [None, False]} and frozen_changes(diff) == []
