"""What runs inside an evaluation worker: build, check and time a solution; time the baselines.

Imports only torch, triton (through solutions), numpy and flashinfer (through baselines). The functions
also run in-process, which the tests and `ksearch eval --in-process` use.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ksearch.eval.report import PASSED, BaselineTimes, EvalReport, WorkloadResult
from ksearch.eval.rules import check_outputs, normalize_outputs
from ksearch.eval.timing import time_call
from ksearch.task import Task, Workload, load_task


@dataclass
class EvalJob:
    task: str
    source: str
    solution_id: str
    workloads: list[Workload]
    device: str
    run_seed: int = 0
    warmup: int = 10
    iterations: int = 50
    entry: str = "run"
    tasks_root: str | None = None


@dataclass
class BaselineJob:
    task: str
    workloads: list[Workload]
    device: str
    run_seed: int = 0
    warmup: int = 10
    iterations: int = 50
    tasks_root: str | None = None
    variants: list[str] = field(default_factory=list)   # empty: all the task offers
    time_reference: bool = False                        # also time the PyTorch reference (bench)


_TASKS: dict[str, Task] = {}
_CASES: dict[tuple[str, str, int, str], tuple[dict[str, Any], list[Any]]] = {}


def _task(name: str, root: str | None) -> Task:
    if name not in _TASKS:
        _TASKS[name] = load_task(name, Path(root) if root else None)
    return _TASKS[name]


def _case(task: Task, w: Workload, seed: int, device: str) -> tuple[dict[str, Any], list[Any]]:
    """Inputs and reference outputs for a workload, cached for the worker's lifetime."""
    key = (task.name, w.name, seed, device)
    if key not in _CASES:
        if len(_CASES) > 8:     # bounded: MLA inputs hold a ~1 GB cache each
            _CASES.pop(next(iter(_CASES)))
        inputs = task.make_inputs(w, device=device, seed=w.input_seed(seed))
        with torch.no_grad():
            ref = normalize_outputs(task.reference(**inputs), task.definition.output_names)
        _CASES[key] = (inputs, ref)
    return _CASES[key]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _fresh_args(inputs: dict[str, Any]) -> list[Any]:
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs.values()]


def _tail(text: str, limit: int = 4000) -> str:
    return text if len(text) <= limit else "...\n" + text[-limit:]


def evaluate_solution(job: EvalJob) -> EvalReport:
    t0 = time.perf_counter()
    task = _task(job.task, job.tasks_root)
    out = io.StringIO()
    report = EvalReport(solution_id=job.solution_id, status=PASSED, device=job.device)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        from ksearch.instantiate.loader import load_entry_point
        try:
            fn = load_entry_point(job.source, job.entry, name_hint=job.task[:24])
        except Exception:
            report.status = "COMPILE_ERROR"
            report.log = _tail(out.getvalue() + traceback.format_exc())
            report.elapsed_s = time.perf_counter() - t0
            return report
        names = task.definition.output_names
        for w in job.workloads:
            inputs, ref = _case(task, w, job.run_seed, job.device)
            args = _fresh_args(inputs)
            try:
                with torch.no_grad():
                    got = normalize_outputs(fn(*args), names)
                _sync(job.device)
            except Exception as e:
                msg = f"{type(e).__name__}: {e}"
                report.workloads.append(WorkloadResult(w.name, "RUNTIME_ERROR", msg[:500]))
                report.status = "RUNTIME_ERROR"
                report.log = _tail(out.getvalue() + traceback.format_exc())
                break
            c = task.correctness
            check = check_outputs(got, ref, names, atol=c.atol, rtol=c.rtol,
                                  required_matched_ratio=c.required_matched_ratio)
            result = WorkloadResult(w.name, check.status, check.message, None, check.max_abs_error,
                                    check.max_rel_error, check.matched_ratio)
            report.workloads.append(result)
            if not check.passed:
                report.status = check.status
                break
            try:
                timed_args = _fresh_args(inputs)
                result.latency_ms = time_call(lambda: fn(*timed_args), device=job.device,
                                              warmup=job.warmup, iterations=job.iterations)
            except Exception as e:
                result.status, result.message = "RUNTIME_ERROR", f"while timing: {type(e).__name__}: {e}"[:500]
                report.status = "RUNTIME_ERROR"
                report.log = _tail(out.getvalue() + traceback.format_exc())
                break
    if not report.log:
        report.log = _tail(out.getvalue())
    report.elapsed_s = time.perf_counter() - t0
    return report


def measure_baselines(job: BaselineJob) -> BaselineTimes:
    """Time the task's baselines (GPU) or its reference (CPU), each checked against the reference first."""
    task = _task(job.task, job.tasks_root)
    names = task.definition.output_names
    on_gpu = job.device.startswith("cuda")
    factories = task.baselines() if on_gpu else {}
    if job.variants:
        factories = {k: v for k, v in factories.items() if k in job.variants}
    variants: dict[str, dict[str, float]] = {}
    failures: dict[str, str] = {}
    for name, factory in factories.items():
        times: dict[str, float] = {}
        try:
            for w in job.workloads:
                inputs, ref = _case(task, w, job.run_seed, job.device)
                call = factory(inputs)
                got = normalize_outputs(call(), names)
                _sync(job.device)
                c = task.correctness
                check = check_outputs(got, ref, names, atol=c.atol, rtol=c.rtol,
                                      required_matched_ratio=c.required_matched_ratio)
                if not check.passed:
                    raise RuntimeError(f"disagrees with the reference on {w.name}: {check.message}")
                times[w.name] = time_call(call, device=job.device, warmup=job.warmup, iterations=job.iterations)
            variants[name] = times
        except Exception as e:
            failures[name] = f"{type(e).__name__}: {e}"[:800]
    ref_times: dict[str, float] = {}
    if job.time_reference or not variants:
        for w in job.workloads:
            inputs, _ = _case(task, w, job.run_seed, job.device)
            ref_times[w.name] = time_call(lambda: task.reference(**inputs), device=job.device,
                                          warmup=min(job.warmup, 1), iterations=max(1, min(job.iterations, 3)))
    if variants:
        label = "FlashInfer best of " + ", ".join(variants) if any("flashinfer" in v for v in variants) \
            else "baseline best of " + ", ".join(variants)
        return BaselineTimes(job.device, variants, label, failures, ref_times)
    where = "GPU" if on_gpu else "CPU"
    return BaselineTimes(job.device, {"reference": ref_times}, f"PyTorch reference ({where})", failures, ref_times)


def worker_main(conn: Any, interpret: bool) -> None:
    """Serve jobs over a pipe until told to stop. Exceptions become error replies, not dead workers."""
    if interpret:
        from ksearch.eval.interpreter import prepare_interpreter
        prepare_interpreter()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    conn.send(("ready", os.getpid()))
    while True:
        try:
            kind, payload = conn.recv()
        except EOFError:
            return
        if kind == "stop":
            return
        try:
            if kind == "evaluate":
                conn.send(("ok", evaluate_solution(payload)))
            elif kind == "baseline":
                conn.send(("ok", measure_baselines(payload)))
            else:
                conn.send(("error", f"unknown job kind {kind!r}"))
        except Exception:
            conn.send(("error", traceback.format_exc()))
