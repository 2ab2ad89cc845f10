"""Typed results of an evaluation, and the score computed from them.

Statuses (`Status`): `PASSED`, or one failure:

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

The clocks (`Metric`, `TimingMethod`): every row carries both clocks' medians and spreads as the judge read
them; `latency_ms` is the one the score uses (`score_metric`: `eval.metric` on a GPU, call latency on a CPU).

Every field has a default, so journal records written before a field existed still load; the enums are
`str` enums, so records read and write the same strings as before.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum, auto
from typing import Any, cast


class Status(StrEnum):
    """The verdict on a candidate (and on each of its workloads).

    In every enum of ksearch a member's name is its value, as records and configs write it (OmegaConf
    matches config values to members by name)."""

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


#: What a candidate's own process may report about itself (claims that can only fail it); everything else
#: (timeouts, tampering, timing) is decided by the judge.
CANDIDATE_STATUSES = frozenset({Status.COMPILE_ERROR, Status.RUNTIME_ERROR, Status.INCORRECT_SHAPE,
                                Status.INCORRECT_DTYPE, Status.INCORRECT_NUMERICAL, Status.INCORRECT_INPUT_MODIFIED,
                                Status.INCORRECT_LATE_WRITE})


class Metric(StrEnum):
    """The clock a score is computed on."""

    gpu_time = auto()           # CUDA-graph replay (or synchronised eager calls), L2 cold
    call_latency = auto()       # eager calls, host included


class TimingMethod(StrEnum):
    """How a row's GPU time (or, on a CPU, its latency) was taken."""

    cuda_graph = auto()
    eager_sync = auto()         # n x [flush, call, device sync]: the work was not in the graph
    cupti = auto()              # kernel spans from CUPTI (baselines that cannot be captured)
    wall_clock_cpu = auto()


def score_metric(device: str, wanted: Metric | str = Metric.gpu_time) -> Metric:
    """The clock scores use on `device`: the one asked for (`eval.metric`) on a GPU; a CPU has only call
    latency (no graphs, no GPU time)."""
    return Metric(wanted) if device.startswith("cuda") else Metric.call_latency


def _recorded(enum: type[StrEnum], value: Any) -> Any:
    """A recorded enum value as its member; a value this version does not know (a newer one wrote it) stays
    the string it was, so the record still loads."""
    try:
        return enum(value)
    except ValueError:
        return value


def _known(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    """Only the keys `cls` knows: old records lack new fields (defaults fill them), newer ones may add some."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in d.items() if k in names}


@dataclass
class WindowBreakdown:
    """Where one timed GPU window's time went, by the judge's clock and the candidate's stamps
    (ksearch.eval.clocks.stamps): kept to explain a gap between the judge's clock and the candidate's events,
    never used for a verdict or a score. The candidate's parts are its process's claims."""

    which: str = ""             # "slowest" or "fastest" of the workload's timed rounds
    mode: str = ""              # the window's timing mode (graph | eager_sync)
    calls: int = 0
    ms: float = 0.0             # the judge's clock for the window
    #: part -> ms, in the window's order; they sum to `ms`. Only the judge's parts (send, candidate, stop,
    #: take) when the candidate's stamps are unusable
    parts_ms: dict[str, float] = field(default_factory=dict)
    unusable: str = ""          # why the candidate's stamps were not used ("" when they were)
    #: the candidate's stamps less the judge's clock start (arrived, mapped, inputs, calls, outputs, sending),
    #: when it sent six finite numbers: to see why unusable ones were
    candidate_stamps_ms: list[float] = field(default_factory=list)
    inputs_split_ms: list[float] = field(default_factory=list)      # its inputs as [make, copy, wait for the GPU]

    @staticmethod
    def from_json(d: Any) -> WindowBreakdown | None:
        """A recorded breakdown, or None for one that is malformed (a diagnosis is never worth failing a load)."""
        if isinstance(d, WindowBreakdown):
            return d
        if not isinstance(d, dict):
            return None
        try:
            return WindowBreakdown(**_known(WindowBreakdown, d))
        except TypeError:
            return None


#: The most breakdowns a row keeps: its slowest and its fastest window.
WINDOW_BREAKDOWNS = 2


@dataclass
class WorkloadResult:
    workload: str
    status: Status
    message: str = ""
    latency_ms: float | None = None           # the median of `trial_ms`: the clock the score uses
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    matched_ratio: float | None = None
    trial_ms: list[float] = field(default_factory=list)   # each timing trial's time per call, that clock
    spread: float | None = None               # relative run-to-run spread of latency_ms (ksearch.eval.clocks.noise)
    baseline_ms: float | None = None          # the best baseline variant on this workload
    baseline_spread: float | None = None
    gpu_time_ms: float | None = None          # GPU time per call (CUDA-graph replay or CUPTI), judge's clock
    gpu_time_spread: float | None = None
    call_latency_ms: float | None = None      # eager call, host launch cost included, judge's clock
    call_latency_spread: float | None = None
    timing_method: TimingMethod | str = ""    # "" when not timed
    self_reported_ms: float | None = None     # the candidate's own event time: a cross-check, never used
    unstable: bool = False                    # its two halves disagreed beyond the spread, twice
    judged_s: float | None = None             # the judge's wall time on this workload for this candidate
    #: (GPU) where the slowest and the fastest timed window's time went: a diagnosis only
    window_breakdown: list[WindowBreakdown] = field(default_factory=list)

    @staticmethod
    def from_json(d: dict[str, Any]) -> WorkloadResult:
        d = _known(WorkloadResult, d)
        if "status" in d:
            d["status"] = _recorded(Status, d["status"])
        if d.get("timing_method"):
            d["timing_method"] = _recorded(TimingMethod, d["timing_method"])
        if "window_breakdown" in d:
            kept = d["window_breakdown"] if isinstance(d["window_breakdown"], list) else []
            d["window_breakdown"] = [b for b in map(WindowBreakdown.from_json, kept[:WINDOW_BREAKDOWNS]) if b]
        return WorkloadResult(**d)


@dataclass
class EvalReport:
    """One candidate on one workload set. `score` is set only when every workload passed."""

    solution_id: str
    status: Status
    device: str
    workloads: list[WorkloadResult] = field(default_factory=list)
    log: str = ""
    elapsed_s: float = 0.0
    score: float | None = None
    score_name: str = ""
    baseline: str = ""
    speedups: dict[str, float] = field(default_factory=dict)
    vs_baselines: dict[str, float] = field(default_factory=dict)
    score_spread: float | None = None         # relative uncertainty of score (candidate and baseline spreads)
    flags: list[str] = field(default_factory=list)     # suspicious findings that did not fail it, with reasons
    env: dict[str, Any] = field(default_factory=dict)  # what measured it: GPU, clocks, versions; or the CPU
    #: variant -> workload -> ms of baselines timed in the same job (records written before the judge moved
    #: out of the candidate's process; new reports leave it empty)
    baseline_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    trials: int = 0                 # timing trials per workload
    check_trials: int = 0           # checks on fresh inputs per workload
    #: what the hardware said about the candidate's kernels (ksearch.profile.Profile.to_json()), or None with
    #: the reason in profile_note (on a CPU the Triton interpreter compiles nothing to profile)
    profile: dict[str, Any] | None = None
    profile_note: str = ""

    @property
    def passed(self) -> bool:
        return self.status == Status.PASSED

    def first_failure(self) -> WorkloadResult | None:
        return next((w for w in self.workloads if w.status != Status.PASSED), None)

    def fail(self, status: Status, message: str, workload: str | None = None) -> None:
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
    def from_json(d: dict[str, Any]) -> EvalReport:
        d = _known(EvalReport, d)
        if "status" in d:
            d["status"] = _recorded(Status, d["status"])
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
class BaselineOrigin:
    """Where one baseline number (a variant on a workload) came from: timed in the job that returned it, or
    reused from the cache across runs (ksearch.eval.trusted.baseline_cache), timed earlier on this GPU."""

    reused: bool = False
    measured_at: float = 0.0        # when it was timed (epoch seconds)
    device: str = ""                # the GPU's name (on a CPU, the CPU's model)
    host: str = ""
    key: str = ""                   # the cache entry it was stored under or read from ("": the cache was off)


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
    metric: Metric = Metric.gpu_time    # which clock the variants' numbers are
    other: dict[str, dict[str, float]] = field(default_factory=dict)   # the other clock, for reports
    methods: dict[str, str] = field(default_factory=dict)              # variant -> timing method
    # variant -> workload -> where its number came from (empty in records written before the baseline cache)
    origins: dict[str, dict[str, BaselineOrigin]] = field(default_factory=dict)
    cache_note: str = ""        # why the baseline cache could not be used, when it could not (a warning)

    def best(self) -> dict[str, float]:
        return best_of(self.variants)

    def provenance(self) -> str:
        """"" when every number was timed in its own job (or the record predates origins); else which were
        reused from the baseline cache, from when and which device: "reused from 2026-12-05 14:03 on NVIDIA H200"."""
        import time

        every = [o for per in self.origins.values() for o in per.values()]
        reused = [o for o in every if o.reused]
        if not reused:
            return ""
        oldest = min(o.measured_at for o in reused)
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(oldest))
        where = ", ".join(sorted({o.device for o in reused if o.device})) or "an unnamed device"
        share = "" if len(reused) == len(every) else f"{len(reused)} of {len(every)} timings "
        return f"{share}reused from {when} on {where}"

    def described(self) -> str:
        """The label, and where the numbers were reused from when they were (what reports print)."""
        where = self.provenance()
        return f"{self.label} ({where})" if where else self.label

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
    def from_json(d: dict[str, Any]) -> BaselineTimes:
        d = _known(BaselineTimes, d)
        if "metric" in d:
            d["metric"] = _recorded(Metric, d["metric"])
        return BaselineTimes(**typed_origins(d))


def typed_origins(d: dict[str, Any]) -> dict[str, Any]:
    """`d` (a BaselineTimes' fields) with its recorded origins as BaselineOrigin; malformed ones are left out."""
    raw = d.get("origins")
    if raw is None:
        return d
    origins: dict[str, dict[str, BaselineOrigin]] = {}
    for variant, per in (raw.items() if isinstance(raw, dict) else ()):
        typed = {w: _origin(o) for w, o in per.items()} if isinstance(per, dict) else {}
        origins[str(variant)] = {w: o for w, o in typed.items() if o is not None}
    return {**d, "origins": origins}


def _origin(o: Any) -> BaselineOrigin | None:
    if isinstance(o, BaselineOrigin):
        return o
    if not isinstance(o, dict):
        return None
    try:
        return BaselineOrigin(bool(o.get("reused", False)), float(o.get("measured_at", 0.0)),
                              str(o.get("device", "")), str(o.get("host", "")), str(o.get("key", "")))
    except (TypeError, ValueError):
        return None


def score_report(report: EvalReport, baseline: BaselineTimes) -> EvalReport:
    """Geometric mean over workloads of baseline latency / candidate latency (higher is better).

    The baselines are measured once per run by the trusted worker with the same clock as the candidates
    (`BaselineTimes.metric`); old reports that carry baselines timed in their own job use those.
    `score_spread` combines the candidate's and the baseline's relative spreads (ksearch.eval.clocks.noise).
    """
    from ksearch.eval.clocks.noise import score_spread

    if not report.passed:
        return report
    measured = {w.workload: w.latency_ms for w in report.workloads}
    interleaved = {n: t for n, t in report.baseline_ms.items() if all(w in t for w in measured)}
    variants = interleaved or baseline.variants
    best = best_of(variants)
    if not measured or not all(_is_time(v) for v in measured.values()) or not all(w in best for w in measured):
        return report
    lat = cast("dict[str, float]", measured)       # every latency is a time (checked just above)
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
