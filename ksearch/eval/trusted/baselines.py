"""Timing the task's baselines (GPU: FlashInfer and other variants; CPU: the PyTorch reference) in the
trusted worker, with the same two clocks the judge applies to candidates (ksearch.eval.clocks.gputime):

- GPU time: wall(replay of a CUDA graph of n x [L2 flush, call]) - wall(replay of n flushes), over n;
  CUPTI kernel spans when the call cannot be captured;
- call latency: wall(n eager calls + one sync) / n.

Each variant is checked against the reference before it is timed; one that fails is left out with the
reason. Each workload is measured once per job, in rounds until the spread of the chosen clock is under
`SPREAD_TARGET` (or `MAX_ROUNDS` is reached), not once per candidate.

On a CPU (the PyTorch reference, timed on a machine other processes share) one short round says little:
a round is made long enough to span several scheduler time slices (`CPU_ROUND_MS`), at least
`CPU_MIN_ROUNDS` rounds are taken, and more until their spread is under the target, within
`CPU_BUDGET_S` per workload. The median and the spread of those rounds are the baseline and its spread.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ksearch.eval.clocks import gputime
from ksearch.eval.clocks.noise import noise_floor, relative_spread
from ksearch.eval.report import BaselineOrigin, BaselineTimes, Metric, TimingMethod
from ksearch.eval.trusted.baseline_cache import BaselineCache, CacheKey, CacheSettings, KeyMaker, Timing, device_name
from ksearch.eval.trusted.job import Job
from ksearch.eval.trusted.rules import check_outputs, normalize_outputs
from ksearch.task import Task, Workload, load_task

SPREAD_TARGET = 0.01
MAX_ROUNDS = 15
GRAPH_TARGET_MS = 25.0
CPU_ROUND_MS = 10.0         # a CPU round: calls enough to last this long (time slices are a few ms)
CPU_MIN_ROUNDS = 8
CPU_MAX_ROUNDS = 40
CPU_BUDGET_S = 1.0          # per workload and variant, once CPU_MIN_ROUNDS rounds are in
REFERENCE = "reference"     # the PyTorch reference: the CPU's baseline, and (bench) a column on a GPU
#: A GPU subject whose one call takes longer than this is timed by that call alone (`time_subject`'s `slow_ms`):
#: the PyTorch reference of a 16k-token prefill takes seconds a call, and timing it in graphs and rounds (20+
#: calls a workload) kept `ksearch bench eval.workloads=full` of MLA prefill measuring for over 4 minutes
#: before its first kernel (H100, session 18). Its column is for information only.
REFERENCE_SLOW_MS = 50.0

_TASKS: dict[tuple[str, str | None], Task] = {}


@dataclass(kw_only=True)
class BaselineJob(Job):
    variants: list[str] = field(default_factory=list)   # empty: all the task offers
    time_reference: bool = False                        # also time the PyTorch reference (bench)
    cache: CacheSettings = field(default_factory=CacheSettings)     # the baseline cache across runs (default off)


def get_task(name: str, root: str | None) -> Task:
    key = (name, root)
    if key not in _TASKS:
        _TASKS[key] = load_task(name, Path(root) if root else None)
    return _TASKS[key]


def _until_steady(measure: Callable[[], float], floor: float, min_rounds: int, max_rounds: int = MAX_ROUNDS,
                  budget_s: float | None = None) -> list[float]:
    """Rounds of `measure()` until the relative spread is under the target, `max_rounds` are taken, or
    (with `budget_s`) that many seconds have passed since the first round once `min_rounds` are in."""
    out: list[float] = []
    t0 = _perf()
    while len(out) < max_rounds:
        out.append(measure())
        if len(out) < min_rounds:
            continue
        if relative_spread(out, 0.0) <= max(SPREAD_TARGET, floor / 2):
            break
        if budget_s is not None and _perf() - t0 >= budget_s:
            break
    return out


def _cpu_rounds(fn: Callable[[int], Any], warmup: int, trials: int, floor: float) -> list[float]:
    """Call-latency rounds on a CPU (ms per call): see the module docstring."""
    per_call_ms = float("inf")
    for _ in range(max(1, warmup)):       # the fastest warm-up call sizes the rounds (the first is cold)
        t0 = _perf()
        fn(0)
        per_call_ms = min(per_call_ms, max((_perf() - t0) * 1e3, 1e-3))
    n = max(1, math.ceil(CPU_ROUND_MS / per_call_ms))
    return _until_steady(lambda: gputime.eager_ms(fn, 1, n, "cpu", 1)[0], floor, max(CPU_MIN_ROUNDS, trials),
                         CPU_MAX_ROUNDS, CPU_BUDGET_S)


def time_subject(call: Callable[[], Any], device: str, warmup: int, trials: int, slow_ms: float | None = None
                 ) -> tuple[dict[Metric, list[float]], TimingMethod]:
    """Per-round ms on each clock (a CPU has only call latency) for a trusted zero-argument call, and the
    GPU-time method used. On a GPU, a call slower than `slow_ms` is timed once, by the call that measured it
    (its events for GPU time, the host clock around it for latency: one round each; at that length the L2's
    state does not matter)."""
    on_gpu = device.startswith("cuda")
    floor = noise_floor(device)
    def fn(_i: int) -> Any:
        return call()

    if not on_gpu:
        with torch.no_grad():
            return {Metric.call_latency: _cpu_rounds(fn, warmup, trials, floor)}, TimingMethod.wall_clock_cpu
    with torch.no_grad():
        for _ in range(max(1, warmup)):
            fn(0)
    gputime.sync(device)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = _perf()
    a.record()
    fn(0)
    b.record()
    b.synchronize()
    wall = (_perf() - t0) * 1e3
    est = float(a.elapsed_time(b))
    if slow_ms is not None and est > slow_ms:
        return {Metric.gpu_time: [est], Metric.call_latency: [wall]}, TimingMethod.eager_sync
    n = gputime.iterations_for(GRAPH_TARGET_MS, est)      # ~25 ms of calls per replay (as the judge does)
    timer = gputime.GraphTimer(fn, 1, n)
    cap = timer.build()
    method = TimingMethod.cuda_graph
    if cap.call_graph is not None:
        timer.replay("call")
        timer.replay("flush")
        gpu = _until_steady(timer.gpu_ms, floor, max(3, trials))
    else:
        method = TimingMethod.cupti
        gpu = _until_steady(lambda: statistics.median(gputime.cupti_times(fn, 1, min(n, 50)) or [float("nan")]),
                            floor, max(3, trials))
    del timer, cap
    lat = _until_steady(lambda: gputime.eager_ms(fn, 1, n, device, 1)[0], floor, max(3, trials))
    return {Metric.gpu_time: gpu, Metric.call_latency: lat}, method


def _perf() -> float:
    import time

    return time.perf_counter()


def baseline_inputs(task: Task, w: Workload, seed: int, device: str) -> tuple[dict[str, Any], list[Any]]:
    inputs = task.make_inputs(w, device=device, seed=w.input_seed(seed))
    with torch.no_grad():
        ref = normalize_outputs(task.reference(**inputs), task.definition.output_names)
    gputime.sync(device)
    return inputs, ref


def baseline_factories(task: Task, job: BaselineJob) -> dict[str, Callable[[dict[str, Any]], Callable[[], Any]]]:
    """The variants to time: on a GPU the task's baselines (those the job asks for), on a CPU none."""
    factories = task.baselines() if job.device.startswith("cuda") else {}
    if job.variants:
        factories = {k: v for k, v in factories.items() if k in job.variants}
    return factories


def _subject(name: str) -> str:
    """A variant's name in the baseline cache's keys (the reference is "reference": a variant may not pose as it)."""
    return name if name == REFERENCE else f"variant:{name}"


class _Collected:
    """What one job has per subject (a variant, or the reference): rounds per clock and workload, the method,
    and where each number came from; what it timed is remembered for the cache."""

    def __init__(self, cache: BaselineCache, env: dict[str, Any]):
        self.cache = cache
        self.device, self.host = device_name(env), str(env.get("host") or "")
        self.clocks: dict[str, dict[Metric, dict[str, list[float]]]] = {}  # subject -> clock -> workload -> rounds
        self.methods: dict[str, TimingMethod | str] = {}
        self.origins: dict[str, dict[str, BaselineOrigin]] = {}
        self.reused_envs: list[dict[str, Any]] = []
        self.measured = 0

    def reused(self, name: str, workload: str, key: CacheKey, t: Timing) -> dict[Metric, list[float]]:
        self.reused_envs.append(t.env)
        return self._add(name, workload, {Metric(c): r for c, r in t.rounds.items()}, t.method,
                         BaselineOrigin(True, t.measured_at, t.device, t.host, key.short))

    def timed(self, name: str, workload: str, key: CacheKey | None, rounds: dict[Metric, list[float]],
              method: TimingMethod | str) -> dict[Metric, list[float]]:
        self.measured += 1
        now = self.cache.now()
        if key is not None:
            self.cache.remember(key, name, Timing({str(c): r for c, r in rounds.items()}, str(method), now,
                                                  self.device, self.host))
        return self._add(name, workload, rounds, method,
                         BaselineOrigin(False, now, self.device, self.host, key.short if key else ""))

    def _add(self, name: str, workload: str, rounds: dict[Metric, list[float]], method: TimingMethod | str,
             origin: BaselineOrigin) -> dict[Metric, list[float]]:
        for clock, r in rounds.items():
            self.clocks.setdefault(name, {}).setdefault(clock, {})[workload] = r
        self.methods[name] = method
        self.origins.setdefault(name, {})[workload] = origin
        return rounds


def measure_baselines(job: BaselineJob, cache: BaselineCache | None = None) -> BaselineTimes:
    """Time the task's baselines (GPU) or its reference (CPU), each checked against the reference first.
    What the baseline cache holds under the same key is reused instead of timed (`cache`: by default as
    `job.cache` asks, where this worker's candidates cannot write it)."""
    from ksearch.eval.clocks.environment import describe
    from ksearch.eval.isolation import walls
    from ksearch.task import snapshot

    task = get_task(job.task, job.tasks_root)
    names = task.definition.output_names
    on_gpu = job.device.startswith("cuda")
    if on_gpu and ":" in job.device:
        torch.cuda.set_device(torch.device(job.device))
    if cache is None:
        cache = BaselineCache.for_job(job.cache, job.device, walls.current())
    env0 = describe(job.device)
    keys = cache.key_maker(lambda: KeyMaker(env0, job.device, task.name, snapshot.take(task.name, task.dir).digest))
    factories = baseline_factories(task, job)
    got = _Collected(cache, env0)
    failures: dict[str, str] = {}
    c = task.correctness
    ref_rounds: dict[str, list[float]] = {}
    time_ref = job.time_reference or not factories
    # the reference: on a GPU a slow PyTorch program on large shapes, for information only (bench); on a CPU
    # the baseline itself, cheap next to an interpreted kernel
    ref_timing = (1, 1) if on_gpu else (2, max(3, job.trials))
    for w in job.workloads:
        plan = {name: (job.warmup, job.trials) for name in factories if name not in failures}
        if time_ref:
            plan[REFERENCE] = ref_timing
        seed = w.input_seed(job.run_seed)
        key = {name: keys.key(w, seed, _subject(name), *t) for name, t in plan.items()} if keys else {}
        hits = {name: t for name in key if (t := cache.lookup(key[name])) is not None}
        inputs: dict[str, Any] = {}
        ref: list[Any] = []
        if len(hits) < len(plan):           # something to time: the inputs, and the reference's outputs
            inputs, ref = baseline_inputs(task, w, job.run_seed, job.device)
        for name in plan:
            if name == REFERENCE:
                continue
            if name in hits:
                got.reused(name, w.name, key[name], hits[name])
                continue
            try:
                call = factories[name](inputs)
                out = normalize_outputs(call(), names)
                gputime.sync(job.device)
                check = check_outputs(out, ref, names, atol=c.atol, rtol=c.rtol,
                                      required_matched_ratio=c.required_matched_ratio, rule=c.rule)
                if not check.passed:
                    raise RuntimeError(f"disagrees with the reference on {w.name}: {check.message}")
                rounds, method = time_subject(call, job.device, job.warmup, job.trials)
                got.timed(name, w.name, key.get(name), rounds, method)
            except Exception as e:  # noqa: BLE001 - a failing baseline is recorded; the others still run
                failures[name] = f"{type(e).__name__}: {e}"[:800]
        if time_ref:
            if REFERENCE in hits:
                rounds = got.reused(REFERENCE, w.name, key[REFERENCE], hits[REFERENCE])
            else:
                fn = task.reference
                rounds, method = time_subject(lambda: fn(**inputs), job.device, *ref_timing,  # noqa: B023,F821 - run at once
                                              slow_ms=REFERENCE_SLOW_MS)
                rounds = got.timed(REFERENCE, w.name, key.get(REFERENCE), rounds, method)
            ref_rounds[w.name] = (rounds.get(Metric.gpu_time) or rounds[Metric.call_latency]) if on_gpu \
                else rounds[Metric.call_latency]
        del inputs, ref
    if on_gpu:      # the worker lives on beside the candidates' processes: give the cached blocks back
        torch.cuda.empty_cache()
    floor = noise_floor(job.device)
    clocks = {k: v for k, v in got.clocks.items() if k != REFERENCE}
    complete = {k: v for k, v in clocks.items() if k not in failures
                and all(len(t) == len(job.workloads) for t in v.values())}
    metric = job.metric
    other_clock = Metric.call_latency if metric == Metric.gpu_time else Metric.gpu_time
    med = statistics.median
    variants = {k: {w: med(r) for w, r in v[metric].items()} for k, v in complete.items() if metric in v}
    spread = {k: {w: relative_spread(r, floor) for w, r in v[metric].items()} for k, v in complete.items()
              if metric in v}
    other = {k: {w: med(r) for w, r in v[other_clock].items()} for k, v in complete.items() if other_clock in v}
    ref_times = {w: med(r) for w, r in ref_rounds.items()}
    env = describe(job.device) if got.measured or not got.reused_envs else got.reused_envs[0]
    cache.commit(env, set(failures))
    cache.close()
    if variants:
        label = "FlashInfer best of " + ", ".join(variants) if any("flashinfer" in v for v in variants) \
            else "baseline best of " + ", ".join(variants)
        origins = {k: v for k, v in got.origins.items() if k in variants or k == REFERENCE}
        return BaselineTimes(job.device, variants, label, failures, ref_times, spread, env, metric, other,
                             {k: got.methods.get(k, "") for k in variants}, origins, cache.note)
    where = "GPU" if on_gpu else "CPU"
    return BaselineTimes(job.device, {REFERENCE: ref_times}, f"PyTorch reference ({where})", failures, ref_times,
                         {REFERENCE: {w: relative_spread(r, floor) for w, r in ref_rounds.items()}}, env,
                         metric, {}, {REFERENCE: got.methods.get(REFERENCE, "") if not on_gpu else ""},
                         {REFERENCE: got.origins.get(REFERENCE, {})}, cache.note)
