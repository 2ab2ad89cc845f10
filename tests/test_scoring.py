"""Scores never rest on a time of zero (issue 20: a contended H200 measured a FlashInfer baseline at 0 ms,
and the run died in geomean with a math domain error)."""

from __future__ import annotations

import math

import pytest

from ksearch.eval.report import BaselineTimes, EvalReport, Status, WorkloadResult, geomean, score_report


def _report(lat: dict[str, float]) -> EvalReport:
    return EvalReport("k", Status.PASSED, "cuda",
                      workloads=[WorkloadResult(w, Status.PASSED, latency_ms=ms) for w, ms in lat.items()])


def test_a_zero_baseline_of_one_variant_leaves_the_other():
    base = BaselineTimes("cuda", {"a": {"w1": 0.0, "w2": 2.0}, "b": {"w1": 1.0, "w2": 4.0}}, "best of a, b")
    assert base.best() == {"w1": 1.0, "w2": 2.0}
    r = score_report(_report({"w1": 0.5, "w2": 1.0}), base)
    assert r.score == pytest.approx(2.0)
    assert "a" not in r.vs_baselines and r.vs_baselines["b"] == pytest.approx(math.sqrt(2 * 4))


def test_a_workload_with_no_real_baseline_time_is_left_unscored_not_a_crash():
    base = BaselineTimes("cuda", {"a": {"w1": 0.0, "w2": 2.0}, "b": {"w1": float("nan"), "w2": 4.0}}, "x")
    r = score_report(_report({"w1": 0.5, "w2": 1.0}), base)
    assert r.passed and r.score is None


def test_geomean_refuses_what_is_not_a_ratio():
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    for bad in ([0.0, 1.0], [-1.0], [float("inf")], []):
        with pytest.raises(ValueError):
            geomean(bad)
