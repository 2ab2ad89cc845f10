"""Typed results of an evaluation, and the score computed from them.

Statuses. `PASSED`, or one failure status (`FAILURE_STATUSES`):

- COMPILE_ERROR: the source did not import, or the static checks refused it (the message names the line).
- RUNTIME_ERROR: the call raised, the worker process died (segfault, abort, out of memory; the signal
  is named), or the evaluator itself failed.
- TIMEOUT: no result within `eval.timeout_s`; the worker's whole process group was killed.
- INCORRECT_SHAPE / INCORRECT_DTYPE / INCORRECT_NUMERICAL: wrong outputs. Unwritten elements read as
  NaN (freed memory is scrubbed before every checked call) and fail here, as do results remembered from
  an earlier call (every check uses fresh inputs; the message says when the output equals the previous
  call's).
- INCORRECT_INPUT_MODIFIED: an input tensor changed during the call.
- INCORRECT_LATE_WRITE: outputs changed after the call returned (work on a stream the timer does not
  see, a background thread, work deferred to a later call, or an output buffer reused across calls).
- INCORRECT_TAMPERING: the candidate's process tried something the sandbox refuses (file writes outside
  its scratch folder, sockets, subprocesses, fork, native libraries, frame or gc introspection) or sent the
  judge a malformed reply.
- INCORRECT_TIMING: a measured latency below the workload's physical floor (fewest bytes over the peak
  bandwidth, FLOPs over the peak rate): no real kernel can be that fast, so the measurement was gamed.

New fields (all with defaults, so journal records written before them still load):

- `WorkloadResult.trial_ms`: the median latency of each timing trial; `latency_ms` is their median.
- `WorkloadResult.spread`: relative run-to-run spread of `latency_ms` (see ksearch.eval.noise).
- `WorkloadResult.gpu_time_ms` / `call_latency_ms` (+ spreads): the two clocks, both read by the judge;
  `latency_ms` is the one `eval.metric` picks; `timing_method` says how GPU time was taken.
- `WorkloadResult.baseline_ms` / `baseline_spread`: the best baseline variant on this workload.
- `EvalReport.score_spread`: relative uncertainty of `score` (candidate and baseline spreads combined).
- `EvalReport.flags`: suspicious findings that did not fail the candidate, each with its reason.
- `EvalReport.env`: what measured it (GPU name, clocks, driver, torch/triton/flashinfer versions; or the
  CPU and the Triton interpreter).
- `EvalReport.baseline_ms`: variant -> workload -> ms of baselines timed in the same job (records written
  before the judge moved out of the candidate's process; new reports leave it empty).
- `EvalReport.trials` / `check_trials`: how many timing trials and fresh-input checks were run.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import Any

PASSED = "PASSED"
COMPILE_ERROR = "COMPILE_ERROR"
RUNTIME_ERROR = "RUNTIME_ERROR"
TIMEOUT = "TIMEOUT"
INCORRECT_SHAPE = "INCORRECT_SHAPE"
INCORRECT_DTYPE = "INCORRECT_DTYPE"
INCORRECT_NUMERICAL = "INCORRECT_NUMERICAL"
INCORRECT_INPUT_MODIFIED = "INCORRECT_INPUT_MODIFIED"
INCORRECT_LATE_WRITE = "INCORRECT_LATE_WRITE"
INCORRECT_TAMPERING = "INCORRECT_TAMPERING"
INCORRECT_TIMING = "INCORRECT_TIMING"
FAILURE_STATUSES = (COMPILE_ERROR, RUNTIME_ERROR, INCORRECT_SHAPE, INCORRECT_DTYPE, INCORRECT_NUMERICAL,
                    TIMEOUT, INCORRECT_INPUT_MODIFIED, INCORRECT_LATE_WRITE, INCORRECT_TAMPERING, INCORRECT_TIMING)


def _known(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    """Only the keys `cls` knows: old records lack new fields (defaults fill them), newer ones may add some."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in d.items() if k in names}


@dataclass
class WorkloadResult:
    workload: str
    status: str
    message: str = ""
    latency_ms: float | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    matched_ratio: float | None = None
    trial_ms: list[float] = field(default_factory=list)
    spread: float | None = None
    baseline_ms: float | None = None
    baseline_spread: float | None = None
    gpu_time_ms: float | None = None          # GPU time per call (CUDA-graph replay or CUPTI), judge's clock
    gpu_time_spread: float | None = None
    call_latency_ms: float | None = None      # eager call, host launch cost included, judge's clock
    call_latency_spread: float | None = None
    timing_method: str = ""                   # cuda_graph | eager_sync | cupti (baselines) | wall_clock_cpu
    self_reported_ms: float | None = None     # the candidate's own event time: a cross-check, never used
    unstable: bool = False                    # its two halves disagreed beyond the spread, twice

    @staticmethod
    def from_json(d: dict[str, Any]) -> "WorkloadResult":
        return WorkloadResult(**_known(WorkloadResult, d))


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
    score_spread: float | None = None
    flags: list[str] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)
    baseline_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    trials: int = 0
    check_trials: int = 0

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def first_failure(self) -> WorkloadResult | None:
        return next((w for w in self.workloads if w.status != PASSED), None)

    def fail(self, status: str, message: str, workload: str | None = None) -> None:
        """Mark the report failed; the message lands on the workload's row (or the log when there is none)."""
        self.status = status
        if workload is not None:
            row = next((w for w in self.workloads if w.workload == workload), None)
            if row is None:
                row = WorkloadResult(workload, status)
                self.workloads.append(row)
            row.status, row.message = status, message[:1500]
        else:
            self.log = (message + ("\n" + self.log if self.log else ""))[:20000]

    def summary(self) -> str:
        flags = f" (flags: {'; '.join(self.flags)})" if self.flags else ""
        if self.passed and any(w.unstable for w in self.workloads):
            bad = ", ".join(w.workload for w in self.workloads if w.unstable)
            return f"PASSED, timing unstable on {bad} (no ratio){flags}"
        if self.passed:
            spread = f" ±{100 * self.score_spread:.1f}%" if self.score and self.score_spread else ""
            base = f"PASSED {self.score_name}={self.score:.4g}x{spread} vs {self.baseline}" if self.score else "PASSED"
            return base + flags
        f = self.first_failure()
        reason = self.log.split("--- worker output", 1)[0]       # the reason, without the output excerpt
        head = " | ".join(line.strip() for line in reason.strip().splitlines()[:4] if line.strip())[:400]
        where = f" on {f.workload}: {f.message}" if f else (f": {head}" if head else "")
        return f"{self.status}{where}{flags}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> "EvalReport":
        d = _known(EvalReport, d)
        d["workloads"] = [WorkloadResult.from_json(w) for w in d.get("workloads", [])]
        return EvalReport(**d)


def geomean(values: list[float]) -> float:
    """Geometric mean of positive, finite values (a ratio built on a time of 0 is no ratio: ValueError)."""
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"geomean needs positive finite values, got {values}")
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _is_time(ms: Any) -> bool:
    """A measured latency: positive and finite. A GPU time of 0 is what a graph replay minus a flush replay
    gives on a contended GPU, not a time, and a baseline built on it would divide scores by zero."""
    return isinstance(ms, (int, float)) and math.isfinite(ms) and ms > 0


def best_of(variants: dict[str, dict[str, float]]) -> dict[str, float]:
    """Per workload, the fastest variant's time, over the variants that measured a time for it."""
    names: dict[str, None] = {}
    for times in variants.values():     # insertion order, never set order: prompts must be stable
        names.update(dict.fromkeys(w for w, ms in times.items() if _is_time(ms)))
    return {w: min(v[w] for v in variants.values() if _is_time(v.get(w))) for w in names}


@dataclass
class BaselineTimes:
    """Latency per workload for each baseline variant; `best` is the faster variant per workload."""

    device: str
    variants: dict[str, dict[str, float]]
    label: str          # e.g. "FlashInfer (best of default, tensor_cores)" or "PyTorch reference (CPU)"
    failures: dict[str, str] = field(default_factory=dict)
    reference: dict[str, float] = field(default_factory=dict)   # reference latency, when asked for (not a baseline)
    spread: dict[str, dict[str, float]] = field(default_factory=dict)   # variant -> workload -> relative spread
    env: dict[str, Any] = field(default_factory=dict)
    metric: str = "gpu_time"            # which clock the variants' numbers are (gpu_time | call_latency)
    other: dict[str, dict[str, float]] = field(default_factory=dict)   # the other clock, for reports
    methods: dict[str, str] = field(default_factory=dict)              # variant -> timing method

    def best(self) -> dict[str, float]:
        return best_of(self.variants)

    def best_spread(self) -> dict[str, float]:
        """The spread of the variant that is best on each workload (missing where not measured)."""
        out: dict[str, float] = {}
        for w, ms in self.best().items():
            for name, times in self.variants.items():
                if times.get(w) == ms and w in self.spread.get(name, {}):
                    out[w] = self.spread[name][w]
                    break
        return out

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> "BaselineTimes":
        return BaselineTimes(**_known(BaselineTimes, d))


def score_report(report: EvalReport, baseline: BaselineTimes) -> EvalReport:
    """Geometric mean over workloads of baseline latency / candidate latency (higher is better).

    The baselines are measured once per run by the trusted worker with the same clock as the candidates
    (`BaselineTimes.metric`); old reports that carry baselines timed in their own job use those.
    `score_spread` combines the candidate's and the baseline's relative spreads (ksearch.eval.noise).
    """
    from ksearch.eval.noise import score_spread

    if not report.passed:
        return report
    lat = {w.workload: w.latency_ms for w in report.workloads}
    interleaved = {n: t for n, t in report.baseline_ms.items() if all(w in t for w in lat)}
    variants = interleaved or baseline.variants
    best = best_of(variants)
    if not lat or not all(_is_time(v) for v in lat.values()) or not all(w in best for w in lat):
        return report
    report.speedups = {w: best[w] / lat[w] for w in lat}
    report.score = geomean(list(report.speedups.values()))
    report.score_name = "geomean_speedup"
    report.baseline = baseline.label
    report.vs_baselines = {}
    for name, times in variants.items():
        if all(_is_time(times.get(w)) for w in lat):
            report.vs_baselines[name] = geomean([times[w] / lat[w] for w in lat])
    if interleaved:
        base_spread = {w.workload: w.baseline_spread for w in report.workloads}
    else:
        base_spread = dict(baseline.best_spread())
    report.score_spread = score_spread([w.spread for w in report.workloads],
                                       [base_spread.get(w.workload) for w in report.workloads], report.device)
    return report
