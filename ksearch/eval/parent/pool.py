"""Evaluation pools: several evaluators behind the one Evaluator interface, for cycles side by side.

`local` (default): evaluators on this machine, each owning its own worker processes, lent to callers one
at a time. On a GPU host there is one evaluator per GPU, bound to that GPU, so a timing never shares a
GPU with another timing; on a CPU there is one per slot (search.parallel).

`ray`: one Ray actor per GPU (it asks Ray for the whole GPU) or per CPU slot, each holding an Evaluator
(whose judge process keeps candidate code out of reach there as here). The task travels by name and tasks
root, candidates as source text. Ray starts a local cluster unless `eval.ray_address` names one to join;
it is imported only when chosen. Closing the pool closes every actor's evaluator, kills the actors and
shuts down what this pool started, so no Ray or worker process outlives the run.

Nothing here imports hydra, litellm or rich (GPU hosts are often minimal).
"""

from __future__ import annotations

import ast
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ksearch.eval.report import BaselineTimes, EvalReport

POOLS = ("local", "ray")

_AST_LOCK = threading.Lock()


def serialize_ast_parse() -> None:
    """Make `ast.parse` safe to call from several threads (idempotent).

    CPython 3.11 keeps the AST converter's recursion depth in state shared by all threads, so two threads
    parsing at once can fail with "SystemError: AST constructor recursion depth mismatch" (CPython issue
    106905, fixed in 3.12). Candidate extraction, language detection and static checks all parse source,
    and cycles side by side do so concurrently; under the GIL parsing is serial anyway, so a lock costs
    nothing."""
    if sys.version_info >= (3, 12) or getattr(ast.parse, "_ksearch_serialized", False):
        return
    original = ast.parse

    def parse(*args: Any, **kw: Any) -> Any:
        with _AST_LOCK:
            return original(*args, **kw)

    parse._ksearch_serialized = True  # type: ignore[attr-defined]  # our mark: patched once
    ast.parse = parse


def slot_devices(device: str, slots: int, gpu_count: int) -> list[str]:
    """The device of each evaluator: one per GPU on a GPU host (cuda:0..n-1), else `slots` CPU slots."""
    if device.startswith("cuda"):
        if ":" in device or gpu_count <= 1:   # one GPU: one timing slot, named as asked
            return [device]
        return [f"cuda:{i}" for i in range(max(1, gpu_count))]
    return ["cpu"] * max(1, slots)


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


class _Lender:
    """Lends each member to one caller at a time (threads wait for a free one)."""

    def __init__(self, members: list[Any]):
        self.members = list(members)
        self._free: queue.Queue[Any] = queue.Queue()
        for m in self.members:
            self._free.put(m)

    @contextmanager
    def borrow(self) -> Iterator[Any]:
        member = self._free.get()
        try:
            yield member
        finally:
            self._free.put(member)


class LocalPool:
    """Evaluators on this machine, one per slot; thread-safe."""

    def __init__(self, make: Callable[[str], Any], devices: list[str]):
        if len(devices) > 1:
            serialize_ast_parse()
        self.devices = devices
        self._evaluators = [make(d) for d in devices]
        self._lender = _Lender(self._evaluators)

    @property
    def size(self) -> int:
        return len(self._evaluators)

    def evaluate(self, source: str, solution_id: str, workloads: list[Any],
                 baseline: BaselineTimes | None) -> EvalReport:
        with self._lender.borrow() as ev:
            return ev.evaluate(source, solution_id, workloads, baseline)

    def confirm(self, source: str, solution_id: str, workloads: list[Any],
                baseline: BaselineTimes | None) -> EvalReport:
        with self._lender.borrow() as ev:
            return ev.confirm(source, solution_id, workloads, baseline)

    def remeasure(self, entries: list[tuple[str, str]], workloads: list[Any],
                  baseline: BaselineTimes | None) -> list[EvalReport]:
        with self._lender.borrow() as ev:
            return ev.remeasure(entries, workloads, baseline)

    def measure_baselines(self, workloads: list[Any], time_reference: bool = False) -> BaselineTimes:
        with self._lender.borrow() as ev:
            if time_reference:
                return ev.measure_baselines(workloads, time_reference=True)
            return ev.measure_baselines(workloads)

    def close(self) -> None:
        for ev in self._evaluators:
            ev.close()


class _EvaluatorActor:
    """What runs inside one Ray actor: an Evaluator for a task loaded by name from a tasks root."""

    def __init__(self, task_name: str, tasks_root: str, settings: dict[str, Any]):
        from ksearch.eval.parent.evaluator import EvalSettings, Evaluator
        from ksearch.task import load_task

        self.evaluator = Evaluator(load_task(task_name, Path(tasks_root)), EvalSettings(**settings))

    def evaluate(self, source: str, solution_id: str, workloads: list[Any], baseline: Any) -> EvalReport:
        return self.evaluator.evaluate(source, solution_id, workloads, baseline)

    def confirm(self, source: str, solution_id: str, workloads: list[Any], baseline: Any) -> EvalReport:
        return self.evaluator.confirm(source, solution_id, workloads, baseline)

    def remeasure(self, entries: list[tuple[str, str]], workloads: list[Any], baseline: Any) -> list[EvalReport]:
        return self.evaluator.remeasure(entries, workloads, baseline)

    def measure_baselines(self, workloads: list[Any], time_reference: bool = False) -> BaselineTimes:
        return self.evaluator.measure_baselines(workloads, time_reference=time_reference)

    def worker_pids(self) -> list[int]:
        pid = self.evaluator.worker_pid
        return [os.getpid()] + ([pid] if pid else [])

    def close(self) -> None:
        self.evaluator.close()


@dataclass
class RaySettings:
    address: str | None = None            # None: start a local cluster for this run
    startup_timeout_s: float = 300.0
    close_timeout_s: float = 60.0


class RayPool:
    """One Ray actor per slot, each holding an Evaluator; thread-safe (callers wait for a free actor)."""

    def __init__(self, task_name: str, tasks_root: str, settings: Any, devices: list[str],
                 ray_settings: RaySettings | None = None):
        import ray

        self._ray = ray
        rs = ray_settings or RaySettings()
        self.devices = devices
        self.started_cluster = False
        if not ray.is_initialized():
            package_root = str(Path(__file__).resolve().parents[3])
            env = {"PYTHONPATH": os.pathsep.join([package_root] + ([os.environ["PYTHONPATH"]]
                                                                   if os.environ.get("PYTHONPATH") else []))}
            if rs.address:
                ray.init(address=rs.address, runtime_env={"env_vars": env},
                         logging_level="WARNING", log_to_driver=False)  # type: ignore[arg-type]  # a level name works
            else:
                ray.init(num_cpus=len(devices), num_gpus=sum(1 for d in devices if d.startswith("cuda")),
                         include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": env},
                         logging_level="WARNING")  # type: ignore[arg-type]  # ray takes a level name too
                self.started_cluster = True
        self._owns_ray = self.started_cluster
        remote = ray.remote(_EvaluatorActor)
        self._actors = []
        try:
            for d in devices:
                on_gpu = d.startswith("cuda")
                # Ray hands each GPU actor its own GPU (CUDA_VISIBLE_DEVICES): inside, it is cuda:0.
                s = replace(settings, device="cuda" if on_gpu else d)
                opts: dict[str, Any] = {"num_cpus": 1, "num_gpus": 1 if on_gpu else 0, "max_concurrency": 1}
                self._actors.append(remote.options(**opts).remote(task_name, tasks_root, asdict(s)))
            # wait until every actor is up (a broken environment shows here, not at the first candidate)
            up = ray.get([a.worker_pids.remote() for a in self._actors],  # type: ignore[attr-defined]  # an actor's method
                         timeout=rs.startup_timeout_s)
            self.pids = {p for ps in up for p in ps}      # actor processes, for checks that none outlives us
        except BaseException:
            self.close()
            raise
        self._close_timeout = rs.close_timeout_s
        self._lender = _Lender(self._actors)

    @property
    def size(self) -> int:
        return len(self._actors)

    def _call(self, method: str, *args: Any, **kw: Any) -> Any:
        with self._lender.borrow() as actor:
            return self._ray.get(getattr(actor, method).remote(*args, **kw))

    def evaluate(self, source: str, solution_id: str, workloads: list[Any],
                 baseline: BaselineTimes | None) -> EvalReport:
        return self._call("evaluate", source, solution_id, list(workloads), baseline)

    def confirm(self, source: str, solution_id: str, workloads: list[Any],
                baseline: BaselineTimes | None) -> EvalReport:
        return self._call("confirm", source, solution_id, list(workloads), baseline)

    def remeasure(self, entries: list[tuple[str, str]], workloads: list[Any],
                  baseline: BaselineTimes | None) -> list[EvalReport]:
        return self._call("remeasure", list(entries), list(workloads), baseline)

    def measure_baselines(self, workloads: list[Any], time_reference: bool = False) -> BaselineTimes:
        return self._call("measure_baselines", list(workloads), time_reference=time_reference)

    def close(self) -> None:
        """Close every evaluator (its worker processes die), kill the actors, stop the cluster we started."""
        ray = self._ray
        actors, self._actors = getattr(self, "_actors", []), []
        try:
            if actors:
                try:
                    # the evaluators' worker processes (their judges) are gone once this returns
                    pids = ray.get([a.worker_pids.remote() for a in actors], timeout=10.0)
                    self.pids = getattr(self, "pids", set()) | {p for ps in pids for p in ps}
                    ray.get([a.close.remote() for a in actors], timeout=getattr(self, "_close_timeout", 60.0))
                except Exception:  # noqa: BLE001 - an actor that died or hangs: killing it below is all that is left
                    pass
                for a in actors:
                    ray.kill(a, no_restart=True)
        finally:
            if self._owns_ray or self.started_cluster:
                ray.shutdown()


def build_pool(kind: str, task: Any, settings: Any, slots: int, *, ray_address: str | None = None,
               make_local: Callable[[Any], Any] | None = None) -> Any:
    """The pool for `eval.pool=kind`: `slots` CPU slots, or every visible GPU (one timing slot each)."""
    if kind not in POOLS:
        raise ValueError(f"eval.pool must be one of {', '.join(POOLS)}, got {kind!r}")
    gpus = _gpu_count() if settings.device.startswith("cuda") else 0
    devices = slot_devices(settings.device, slots, gpus)
    if kind == "ray":
        try:
            import ray  # noqa: F401 - only whether it is installed
        except ImportError:
            raise ValueError("eval.pool=ray needs Ray: pip install 'ksearch[ray]' (or eval.pool=local)") from None
        return RayPool(task.name, str(Path(task.dir).parent), settings, devices, RaySettings(address=ray_address))
    if make_local is None:
        from ksearch.eval.parent.evaluator import Evaluator

        def make_local(s: Any) -> Any:
            return Evaluator(task, s)
    return LocalPool(lambda d: make_local(replace(settings, device=d)), devices)
