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
from ksearch.eval.report import BaselineTimes, Metric, TimingMethod
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

_TASKS: dict[tuple[str, str | None], Task] = {}


@dataclass(kw_only=True)
class BaselineJob(Job):
    variants: list[str] = field(default_factory=list)   # empty: all the task offers
    time_reference: bool = False                        # also time the PyTorch reference (bench)


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


def time_subject(call: Callable[[], Any], device: str, warmup: int, trials: int
                 ) -> tuple[dict[Metric, list[float]], TimingMethod]:
    """Per-round ms on each clock (a CPU has only call latency) for a trusted zero-argument call, and the
    GPU-time method used."""
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
    a.record()
    fn(0)
    b.record()
    b.synchronize()
    est = float(a.elapsed_time(b))
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


def measure_baselines(job: BaselineJob) -> BaselineTimes:
    """Time the task's baselines (GPU) or its reference (CPU), each checked against the reference first."""
    from ksearch.eval.clocks.environment import describe

    task = get_task(job.task, job.tasks_root)
    names = task.definition.output_names
    on_gpu = job.device.startswith("cuda")
    if on_gpu and ":" in job.device:
        torch.cuda.set_device(torch.device(job.device))
    factories = task.baselines() if on_gpu else {}
    if job.variants:
        factories = {k: v for k, v in factories.items() if k in job.variants}
    clocks: dict[str, dict[Metric, dict[str, list[float]]]] = {}  # variant -> clock -> workload -> rounds
    methods: dict[str, TimingMethod] = {}
    failures: dict[str, str] = {}
    c = task.correctness
    ref_rounds: dict[str, list[float]] = {}
    for w in job.workloads:
        inputs, ref = baseline_inputs(task, w, job.run_seed, job.device)
        for name, factory in factories.items():
            if name in failures:
                continue
            try:
                call = factory(inputs)
                got = normalize_outputs(call(), names)
                gputime.sync(job.device)
                check = check_outputs(got, ref, names, atol=c.atol, rtol=c.rtol,
                                      required_matched_ratio=c.required_matched_ratio, rule=c.rule)
                if not check.passed:
                    raise RuntimeError(f"disagrees with the reference on {w.name}: {check.message}")
                got_clocks, methods[name] = time_subject(call, job.device, job.warmup, job.trials)
                for clock, rounds in got_clocks.items():
                    clocks.setdefault(name, {}).setdefault(clock, {})[w.name] = rounds
            except Exception as e:  # noqa: BLE001 - a failing baseline is recorded; the others still run
                failures[name] = f"{type(e).__name__}: {e}"[:800]
        if job.time_reference or not factories:
            fn = task.reference
            if on_gpu:      # a slow PyTorch program on large shapes, for information only (bench)
                got_clocks, _ = time_subject(lambda: fn(**inputs), job.device, 1, 1)  # noqa: B023,F821 - run at once
                ref_rounds[w.name] = got_clocks.get(Metric.gpu_time) or got_clocks[Metric.call_latency]
            else:           # the CPU baseline: cheap next to an interpreted kernel
                got_clocks, methods["reference"] = time_subject(lambda: fn(**inputs),  # noqa: B023,F821 - run at once
                                                                job.device, 2, max(3, job.trials))
                ref_rounds[w.name] = got_clocks[Metric.call_latency]
        del inputs, ref
    if on_gpu:      # the worker lives on beside the candidates' processes: give the cached blocks back
        torch.cuda.empty_cache()
    floor = noise_floor(job.device)
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
    env = describe(job.device)
    if variants:
        label = "FlashInfer best of " + ", ".join(variants) if any("flashinfer" in v for v in variants) \
            else "baseline best of " + ", ".join(variants)
        return BaselineTimes(job.device, variants, label, failures, ref_times, spread, env, metric, other,
                             {k: methods.get(k, "") for k in variants})
    where = "GPU" if on_gpu else "CPU"
    return BaselineTimes(job.device, {"reference": ref_times}, f"PyTorch reference ({where})", failures, ref_times,
                         {"reference": {w: relative_spread(r, floor) for w, r in ref_rounds.items()}}, env,
                         metric, {}, {"reference": methods.get("reference", "")})
