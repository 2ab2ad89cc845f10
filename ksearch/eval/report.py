"""Typed results of an evaluation, and the score computed from them."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

PASSED = "PASSED"
FAILURE_STATUSES = ("COMPILE_ERROR", "RUNTIME_ERROR", "INCORRECT_SHAPE", "INCORRECT_DTYPE",
                    "INCORRECT_NUMERICAL", "TIMEOUT")


@dataclass
class WorkloadResult:
    workload: str
    status: str
    message: str = ""
    latency_ms: float | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    matched_ratio: float | None = None


@dataclass
class EvalReport:
    """One candidate on one workload set. `score` is set only when every workload passed."""

    solution_id: str
    status: str
    device: str
    workloads: list[WorkloadResult] = field(default_factory=list)
    log: str = ""
    elapsed_s: float = 0.0
    score: float | None = None
    score_name: str = ""
    baseline: str = ""
    speedups: dict[str, float] = field(default_factory=dict)
    vs_baselines: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def first_failure(self) -> WorkloadResult | None:
        return next((w for w in self.workloads if w.status != PASSED), None)

    def summary(self) -> str:
        if self.passed:
            return f"PASSED {self.score_name}={self.score:.4g}x vs {self.baseline}" if self.score else "PASSED"
        f = self.first_failure()
        where = f" on {f.workload}: {f.message}" if f else (f": {self.log[-300:]}" if self.log else "")
        return f"{self.status}{where}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> "EvalReport":
        d = dict(d)
        d["workloads"] = [WorkloadResult(**w) for w in d.get("workloads", [])]
        return EvalReport(**d)


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclass
class BaselineTimes:
    """Latency per workload for each baseline variant; `best` is the faster variant per workload."""

    device: str
    variants: dict[str, dict[str, float]]
    label: str          # e.g. "FlashInfer (best of default, tensor_cores)" or "PyTorch reference (CPU)"
    failures: dict[str, str] = field(default_factory=dict)
    reference: dict[str, float] = field(default_factory=dict)   # reference latency, when asked for (not a baseline)

    def best(self) -> dict[str, float]:
        names: dict[str, None] = {}
        for times in self.variants.values():     # insertion order, never set order: prompts must be stable
            names.update(dict.fromkeys(times))
        return {w: min(v[w] for v in self.variants.values() if w in v) for w in names}

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> "BaselineTimes":
        return BaselineTimes(**d)


def score_report(report: EvalReport, baseline: BaselineTimes) -> EvalReport:
    """Geometric mean over workloads of baseline latency / candidate latency (higher is better)."""
    if not report.passed:
        return report
    lat = {w.workload: w.latency_ms for w in report.workloads}
    best = baseline.best()
    if not lat or any(v is None or v <= 0 for v in lat.values()) or not all(w in best for w in lat):
        return report
    report.speedups = {w: best[w] / lat[w] for w in lat}
    report.score = geomean(list(report.speedups.values()))
    report.score_name = "geomean_speedup"
    report.baseline = baseline.label
    for name, times in baseline.variants.items():
        if all(w in times for w in lat):
            report.vs_baselines[name] = geomean([times[w] / lat[w] for w in lat])
    return report
