"""The parent side of evaluation: a worker process per device, a timeout per job, respawn on crash.

A candidate that hangs is killed at the timeout (TIMEOUT); one that kills its process (a segfault, an
illegal memory access that poisons the CUDA context) is reported as RUNTIME_ERROR with the exit code,
and the next job gets a fresh worker. The search process itself never runs candidate code.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass
from typing import Any

from ksearch.eval.report import BaselineTimes, EvalReport, score_report
from ksearch.eval.worker import BaselineJob, EvalJob
from ksearch.task import Task, Workload


@dataclass
class EvalSettings:
    device: str                 # "cpu" (Triton interpreter) or "cuda"
    timeout_s: float = 300.0
    warmup: int = 10
    iterations: int = 50
    run_seed: int = 0
    startup_timeout_s: float = 180.0


def resolve_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("eval.device=cuda but no CUDA device is visible; use eval.device=cpu or auto")
    if requested not in ("cpu",) and not requested.startswith("cuda"):
        raise ValueError(f"eval.device must be auto, cpu or cuda[:N], got {requested!r}")
    return requested


class WorkerDied(RuntimeError):
    pass


class Evaluator:
    """Sends jobs to a spawned worker; restarts it after any crash or timeout."""

    def __init__(self, task: Task, settings: EvalSettings):
        self.task = task
        self.settings = settings
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Any = None

    # ---- worker lifecycle ----------------------------------------------------------------------
    def _start(self) -> None:
        from ksearch.eval.worker import worker_main

        parent, child = self._ctx.Pipe()
        interpret = not self.settings.device.startswith("cuda")
        self._proc = self._ctx.Process(target=worker_main, args=(child, interpret), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        if not parent.poll(self.settings.startup_timeout_s):
            self.close(kill=True)
            raise WorkerDied(f"evaluation worker did not start within {self.settings.startup_timeout_s:.0f}s")
        try:
            parent.recv()
        except EOFError:
            code = self._proc.exitcode
            self.close(kill=True)
            raise WorkerDied(f"evaluation worker exited at start-up (exit code {code})") from None

    def close(self, kill: bool = False) -> None:
        if self._proc is None:
            return
        if not kill and self._proc.is_alive():
            try:
                self._conn.send(("stop", None))
                self._proc.join(5)
            except (BrokenPipeError, OSError):
                pass
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._conn.close()
        self._proc = self._conn = None

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _submit(self, kind: str, payload: Any, timeout_s: float) -> tuple[str, Any]:
        """('ok', result) | ('error', traceback) | ('timeout', None) | ('died', exit code)."""
        if self._proc is None or not self._proc.is_alive():
            if self._proc is not None:
                self.close(kill=True)
            self._start()
        try:
            self._conn.send((kind, payload))
            if not self._conn.poll(timeout_s):
                self.close(kill=True)
                return "timeout", None
            return self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self._proc.join(5)
            code = self._proc.exitcode
            self.close(kill=True)
            return "died", code

    # ---- jobs ------------------------------------------------------------------------------------
    def evaluate(self, source: str, solution_id: str, workloads: list[Workload],
                 baseline: BaselineTimes | None) -> EvalReport:
        s = self.settings
        job = EvalJob(task=self.task.name, source=source, solution_id=solution_id, workloads=workloads,
                      device=s.device, run_seed=s.run_seed, warmup=s.warmup, iterations=s.iterations,
                      tasks_root=str(self.task.dir.parent))
        t0 = time.perf_counter()
        kind, value = self._submit("evaluate", job, s.timeout_s)
        if kind == "ok":
            report: EvalReport = value
        elif kind == "timeout":
            report = EvalReport(solution_id, "TIMEOUT", s.device,
                                log=f"no result within eval.timeout_s={s.timeout_s:g}s; the worker was killed")
        elif kind == "died":
            report = EvalReport(solution_id, "RUNTIME_ERROR", s.device,
                                log=f"the evaluation worker died (exit code {value}); the candidate crashed its process")
        else:
            report = EvalReport(solution_id, "RUNTIME_ERROR", s.device, log=f"evaluator error:\n{value}")
        report.elapsed_s = time.perf_counter() - t0
        return score_report(report, baseline) if baseline is not None else report

    def measure_baselines(self, workloads: list[Workload], time_reference: bool = False) -> BaselineTimes:
        s = self.settings
        job = BaselineJob(task=self.task.name, workloads=workloads, device=s.device, run_seed=s.run_seed,
                          warmup=s.warmup, iterations=s.iterations, tasks_root=str(self.task.dir.parent),
                          time_reference=time_reference)
        # FlashInfer JIT-compiles each module on first use (~30 s); allow for it.
        kind, value = self._submit("baseline", job, max(s.timeout_s, 600.0))
        if kind != "ok":
            raise RuntimeError(f"measuring the baselines failed ({kind}): {value}")
        return value
