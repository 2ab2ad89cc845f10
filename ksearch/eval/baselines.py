"""Timing the task's baselines (GPU: FlashInfer variants, interleaved round by round) or, on a CPU, its
PyTorch reference. Each variant is checked against the reference before it is timed; one that fails is
left out with the reason. The result carries a spread per variant and workload and the environment.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ksearch.eval.cases import baseline_case, get_task, reference_of, select_device, sync
from ksearch.eval.noise import noise_floor, relative_spread
from ksearch.eval.report import BaselineTimes
from ksearch.eval.rules import check_outputs, normalize_outputs
from ksearch.eval.timing import Subject, run_trials
from ksearch.task import Workload

_median = statistics.median


@dataclass
class BaselineJob:
    task: str
    workloads: list[Workload]
    device: str
    run_seed: int = 0
    warmup: int = 10
    iterations: int = 50
    trials: int = 3
    tasks_root: str | None = None
    variants: list[str] = field(default_factory=list)   # empty: all the task offers
    time_reference: bool = False                        # also time the PyTorch reference (bench)


def measure_baselines(job: BaselineJob) -> BaselineTimes:
    """Time the task's baselines (GPU; interleaved round by round) or its reference (CPU), each checked first."""
    from ksearch.eval.environment import describe

    task = get_task(job.task, job.tasks_root)
    names = task.definition.output_names
    on_gpu = job.device.startswith("cuda")
    select_device(job.device)
    factories = task.baselines() if on_gpu else {}
    if job.variants:
        factories = {k: v for k, v in factories.items() if k in job.variants}
    variants: dict[str, dict[str, float]] = {}
    spread: dict[str, dict[str, float]] = {}
    failures: dict[str, str] = {}
    floor = noise_floor(job.device)
    c = task.correctness
    for w in job.workloads:
        inputs, ref = baseline_case(task, w, job.run_seed, job.device)
        subjects = []
        for name, factory in factories.items():
            if name in failures:
                continue
            try:
                call = factory(inputs)
                got = normalize_outputs(call(), names)
                sync(job.device)
                check = check_outputs(got, ref, names, atol=c.atol, rtol=c.rtol,
                                      required_matched_ratio=c.required_matched_ratio, rule=c.rule)
                if not check.passed:
                    raise RuntimeError(f"disagrees with the reference on {w.name}: {check.message}")
                subjects.append(Subject(name, call))
            except Exception as e:
                failures[name] = f"{type(e).__name__}: {e}"[:800]
        res = run_trials(subjects, device=job.device, warmup=job.warmup, iterations=job.iterations,
                         trials=max(1, job.trials))
        for name, err in res.errors.items():
            failures[name] = err[:800]
        for s in subjects:
            medians = res.trial_medians(s.name)
            if s.name in res.errors or not medians:
                continue
            variants.setdefault(s.name, {})[w.name] = _median(medians)
            spread.setdefault(s.name, {})[w.name] = relative_spread(medians, floor)
    variants = {k: v for k, v in variants.items() if k not in failures and len(v) == len(job.workloads)}
    ref_times: dict[str, float] = {}
    ref_spread: dict[str, float] = {}
    if job.time_reference or not variants:
        fn = reference_of(task)
        for w in job.workloads:
            inputs, _ = baseline_case(task, w, job.run_seed, job.device)
            if on_gpu:      # a slow PyTorch program on large shapes, timed for information only (bench)
                warm, its, rounds = min(job.warmup, 1), max(1, min(job.iterations, 3)), 1
            else:           # the CPU baseline: cheap next to an interpreted kernel; 3 rounds of 5 after warm-up
                warm, its, rounds = 2, 5, max(3, job.trials)
            res = run_trials([Subject("reference", lambda: fn(**inputs))], device=job.device,
                             warmup=warm, iterations=its, trials=rounds)
            if "reference" in res.errors:
                raise RuntimeError(f"the reference failed on {w.name}: {res.errors['reference']}")
            medians = res.trial_medians("reference")
            ref_times[w.name] = _median(medians)
            ref_spread[w.name] = relative_spread(medians, floor)
    env = describe(job.device)
    if variants:
        label = "FlashInfer best of " + ", ".join(variants) if any("flashinfer" in v for v in variants) \
            else "baseline best of " + ", ".join(variants)
        return BaselineTimes(job.device, variants, label, failures, ref_times,
                             {k: v for k, v in spread.items() if k in variants}, env)
    where = "GPU" if on_gpu else "CPU"
    return BaselineTimes(job.device, {"reference": ref_times}, f"PyTorch reference ({where})", failures, ref_times,
                         {"reference": ref_spread}, env)
