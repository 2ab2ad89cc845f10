"""The parent side of evaluation: static checks, one trusted worker, a timeout per job.

`Evaluator(task, settings)`:

- `evaluate(source, solution_id, workloads, baseline) -> EvalReport`: static checks (Python sources;
  a refusal is COMPILE_ERROR naming the line, an early and friendly answer), then one job in the worker.
- `remeasure(entries, workloads, baseline) -> list[EvalReport]`: several (source, solution_id) in one
  job, interleaved trial by trial so drift hits them equally (for near-ties).
- `measure_baselines(workloads, time_reference=False) -> BaselineTimes`.

The worker (ksearch.eval.trusted.worker) is trusted: it computes references, compares outputs, holds the clock and
writes the reports. Candidate code never runs in it: for each candidate it forks a fresh sandboxed process
(ksearch.eval.trusted.judge, ksearch.eval.isolation.forkserver), so one candidate cannot poison another, and nothing a
candidate does in its own process can reach the verdict. The worker is replaced only if it dies or
overruns a job's time; the parent process never runs candidate code.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ksearch.eval.parent.static_checks import StaticCheckConfig, check_source, refusal_message
from ksearch.eval.parent.worker_handle import Reply, WorkerProcess, WorkerStartError
from ksearch.eval.report import BaselineTimes, EvalReport, Metric, Status, score_metric, score_report
from ksearch.eval.trusted.baseline_cache import BaselineCacheMode
from ksearch.task import Task, Workload

LARGE_OUTPUT_BYTES = 1 << 20
HEARTBEAT_S = 20.0          # a job that runs longer says so this often: no step is silent for 30 s (issue 20)


def _stderr_line(message: str) -> None:
    print(f"ksearch: {message}", file=sys.stderr, flush=True)


@contextmanager
def heartbeat(label: str, notify: Callable[[str], None] | None, every_s: float | None = None) -> Iterator[None]:
    """While the block runs, `notify("still <label> (N s)")` every `every_s` (HEARTBEAT_S) seconds."""
    if notify is None:
        yield
        return
    period = HEARTBEAT_S if every_s is None else every_s
    done = threading.Event()
    t0 = time.monotonic()

    def beat() -> None:
        while not done.wait(period):
            notify(f"still {label} ({time.monotonic() - t0:.0f}s)")

    thread = threading.Thread(target=beat, name="ksearch-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(1.0)


@dataclass
class EvalSettings:
    device: str                 # "cpu" (Triton interpreter) or "cuda"
    timeout_s: float = 300.0    # per job (one candidate; a re-measurement of n gets n times this)
    warmup: int = 10
    run_seed: int = 0           # seeds the baselines' inputs; candidates get fresh inputs every job
    startup_timeout_s: float = 180.0
    trials: int = 3             # timing rounds per workload; their spread is the noise (CPU: check calls count)
    check_trials: int = 2       # correctness checks per workload, each on fresh random inputs
    static_checks: bool = True  # refuse forbidden Python source before it runs
    memory_limit_gb: float | None = None   # CPU candidate address-space cap; None: 3/4 of RAM; 0: no cap
    metric: Metric = Metric.gpu_time    # eval.metric; on a CPU always call latency (`score_metric`)
    sandbox: bool = True        # audit hooks in each candidate's process
    floor_check: bool = True    # a latency below the workload's physical floor is INCORRECT_TIMING
    profile: bool = True        # (GPU) the judge's advisory profile pass after timing (eval.profile)
    # the baseline cache across runs (ksearch.eval.trusted.baseline_cache): auto | on | off | refresh, the age
    # after which an entry is measured again, and its file (None: $XDG_CACHE_HOME/ksearch/baselines.sqlite)
    baseline_cache: BaselineCacheMode = BaselineCacheMode.auto
    baseline_cache_max_age_h: float = 12.0
    baseline_cache_path: str | None = None

    def __post_init__(self) -> None:
        self.metric = score_metric(self.device, self.metric)
        self.baseline_cache = BaselineCacheMode(self.baseline_cache)    # a setting's string is read as its mode


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


def _language(source: str) -> str:
    from ksearch.instantiate.language import language_of

    return language_of(source)


class Evaluator:
    """Sends jobs to a spawned worker; replaces it after any failure, crash or timeout."""

    def __init__(self, task: Task, settings: EvalSettings,
                 notify: Callable[[str], None] | None = _stderr_line):
        self.task = task
        self.settings = settings
        self.notify = notify        # progress lines while a long job runs (None: silent)
        self.static_config = StaticCheckConfig.for_task(task)
        from ksearch.task.snapshot import take
        self.task_snapshot = take(task.name, task.dir)      # read once; every job is judged by these bytes
        self._worker: WorkerProcess | None = None
        self.workers_started = 0
        self._cache_notes: set[str] = set()     # the baseline cache's warnings already said (once each)

    # ---- worker lifecycle ----------------------------------------------------------------------------
    @property
    def on_gpu(self) -> bool:
        return self.settings.device.startswith("cuda")

    def _memory_limit(self) -> int | None:
        from ksearch.eval.trusted.memory import default_cpu_limit_bytes

        gb = self.settings.memory_limit_gb
        if self.on_gpu or gb == 0:
            return None
        return int(gb * 2**30) if gb else default_cpu_limit_bytes()

    def _spawn(self) -> WorkerProcess:
        self.workers_started += 1
        return WorkerProcess(interpret=not self.on_gpu, memory_limit_bytes=self._memory_limit(),
                             tasks=[self.task_snapshot], device=self.settings.device)

    def _request(self, kind: str, payload: Any, timeout_s: float, label: str) -> Reply:
        if self._worker is None or not self._worker.alive():
            if self._worker is not None:
                self._worker.kill()
            self._worker = self._spawn()
        try:
            with heartbeat(label, self.notify):
                reply = self._worker.request(kind, payload, timeout_s, self.settings.startup_timeout_s)
        except WorkerStartError as e:
            self._worker = None
            raise WorkerDied(str(e)) from None
        if reply.kind in ("timeout", "died", "forged"):      # the worker was killed
            self._worker = None
        return reply

    @property
    def worker_pid(self) -> int | None:
        return self._worker.pid if self._worker is not None else None

    def close(self, kill: bool = True) -> None:
        """Stop the worker. It holds nothing worth a graceful exit, so by default its group is killed."""
        if self._worker is None:
            return
        if kill:
            self._worker.kill()
        else:
            self._worker.stop()
        self._worker = None

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- jobs ------------------------------------------------------------------------------------------
    def _job(self, workloads: list[Workload]) -> dict[str, Any]:
        """The fields every job of this evaluator shares (ksearch.eval.trusted.job.Job)."""
        s = self.settings
        return dict(task=self.task.name, workloads=list(workloads), device=s.device, metric=s.metric,
                    run_seed=s.run_seed, warmup=s.warmup, trials=s.trials, tasks_root=str(self.task.dir.parent))

    def _static_refusal(self, source: str, solution_id: str) -> EvalReport | None:
        if not self.settings.static_checks or _language(source) != "python":
            return None
        violations = check_source(source, self.static_config)
        if not violations:
            return None
        return EvalReport(solution_id, Status.COMPILE_ERROR, self.settings.device, log=refusal_message(violations))

    def _judge(self, entries: list[tuple[str, str]], workloads: list[Workload], baseline: BaselineTimes | None,
               nonce: int | None = None, lean: bool = False) -> tuple[list[EvalReport], str]:
        """Reports in entry order, and the job's outcome kind (ok | error | timeout | died | static)."""
        from ksearch.eval.trusted.judge import EvalJob

        s = self.settings
        t0 = time.perf_counter()
        reports: list[EvalReport | None] = [self._static_refusal(src, sid) for src, sid in entries]
        todo = [i for i, r in enumerate(reports) if r is None]
        kind = "static"
        if todo:
            job = EvalJob(**self._job(workloads), candidates=[entries[i] for i in todo],
                          check_trials=s.check_trials, nonce=nonce, timeout_s=s.timeout_s, sandbox=s.sandbox,
                          floor_check=s.floor_check, profile=s.profile and not lean, call_latency=not lean)
            # The judge enforces each candidate's own limit; this one only catches a stuck judge.
            names = ", ".join(entries[i][1] for i in todo[:3]) + (" ..." if len(todo) > 3 else "")
            reply = self._request("judge", job, s.timeout_s * len(todo) + 120.0,
                                  f"judging {names} on {len(workloads)} workloads")
            kind = reply.kind
            if reply.kind == "ok":
                got = reply.value
            else:
                got = [self._failed(entries[i][1], reply) for i in todo]
            for i, r in zip(todo, got):
                self._attach_output(r, reply)
                reports[i] = r
        elapsed = time.perf_counter() - t0
        out: list[EvalReport] = []
        for r in reports:
            assert r is not None
            r.elapsed_s = elapsed
            out.append(score_report(r, baseline) if baseline is not None else r)
        return out, kind

    def _failed(self, solution_id: str, reply: Reply) -> EvalReport:
        s = self.settings
        if reply.kind == "timeout":
            return EvalReport(solution_id, Status.TIMEOUT, s.device,
                              log=f"no result within eval.timeout_s={s.timeout_s:g}s; the worker's process group "
                                  f"was killed")
        if reply.kind == "died":
            return EvalReport(solution_id, Status.RUNTIME_ERROR, s.device,
                              log=f"the evaluation worker died ({reply.value}): the candidate crashed its process")
        if reply.kind == "forged":
            return EvalReport(solution_id, Status.INCORRECT_TAMPERING, s.device, log=str(reply.value))
        return EvalReport(solution_id, Status.RUNTIME_ERROR, s.device, log=f"evaluator error:\n{reply.value}")

    def _attach_output(self, report: EvalReport, reply: Reply) -> None:
        if reply.output_bytes and reply.output.strip():
            report.log = (report.log + ("\n" if report.log else "") +
                          f"--- worker output during this job ({reply.output_bytes} bytes; first and last KB) ---\n"
                          + reply.output)
        if reply.output_bytes > LARGE_OUTPUT_BYTES:
            report.flags.append(f"wrote {reply.output_bytes / 2**20:.1f} MiB to stdout/stderr (kept the first "
                                f"and last KB)")

    def evaluate(self, source: str, solution_id: str, workloads: list[Workload],
                 baseline: BaselineTimes | None) -> EvalReport:
        reports, _ = self._judge([(source, solution_id)], workloads, baseline)
        return reports[0]

    def confirm(self, source: str, solution_id: str, workloads: list[Workload],
                baseline: BaselineTimes | None) -> EvalReport:
        """A held-out confirmation (validation): only what its score needs. No eager call-latency windows when
        the score is GPU time, and no profile (the kernel's feedback evaluation has one): on the H200 a
        validation cost 2.5-3x a feedback evaluation of the same kernel, over issue 20's 2x."""
        reports, _ = self._judge([(source, solution_id)], workloads, baseline, lean=True)
        return reports[0]

    def remeasure(self, entries: list[tuple[str, str]], workloads: list[Workload],
                  baseline: BaselineTimes | None) -> list[EvalReport]:
        """Time several kernels side by side in one job (round-robin per trial, shared fresh inputs)."""
        if not entries:
            return []
        reports, kind = self._judge(list(entries), workloads, baseline)
        if len(entries) > 1 and kind in ("timeout", "died", "error", "forged"):
            # The job failed as a whole: judge each alone so the one that hangs or crashes is named.
            reports = [self.evaluate(src, sid, workloads, baseline) for src, sid in entries]
        elif len(entries) > 1 and any(r.status == Status.RUNTIME_ERROR for r in reports):
            # One kernel's fault (a CUDA error poisons the context) can fail the others in the same
            # process: a runtime error in a shared job is confirmed alone before it counts.
            reports = [self.evaluate(src, sid, workloads, baseline) if r.status == Status.RUNTIME_ERROR else r
                       for (src, sid), r in zip(entries, reports)]
        return reports

    def measure_baselines(self, workloads: list[Workload], time_reference: bool = False) -> BaselineTimes:
        from ksearch.eval.trusted.baseline_cache import CacheSettings
        from ksearch.eval.trusted.baselines import BaselineJob

        s = self.settings
        cache = CacheSettings(s.baseline_cache, s.baseline_cache_max_age_h, s.baseline_cache_path)
        job = BaselineJob(**self._job(workloads), time_reference=time_reference, cache=cache)
        # FlashInfer JIT-compiles each module on first use (~30 s); allow for it.
        reply = self._request("baseline", job, max(s.timeout_s, 600.0),
                              f"measuring the baselines on {len(workloads)} workloads")
        if reply.kind != "ok":
            raise RuntimeError(f"measuring the baselines failed ({reply.kind}): {reply.value}\n{reply.output[-2000:]}")
        note = getattr(reply.value, "cache_note", "")       # the cache could not be used: say so (once)
        if note and note not in self._cache_notes and self.notify is not None:
            self._cache_notes.add(note)
            self.notify(note)
        return reply.value
