"""Runtime guards in the worker: what a candidate's code did to the process while it ran.

The static checks refuse what they can see in the source; these catch what they cannot (code built at
run time, CUDA sources, static checks turned off). A *window* opens around every piece of candidate
code (module import, each call, each timing trial) and is verified when it closes:

- Timers and checkers. At worker start the guard records the identity of the functions the evaluator
  relies on (time.perf_counter, torch.cuda.synchronize, torch.cuda.Event.record/elapsed_time, the torch
  functions the correctness rule uses, ksearch.eval's own functions). A replaced one is put back and
  the candidate fails (INCORRECT_TAMPERING). The evaluator also binds these at import, so a patch cannot
  change a measurement in flight. Other callables of time, torch, torch.Tensor, torch.cuda, builtins,
  statistics and math are compared with their state when the window opened: restored and flagged.
- Global torch state (default dtype, grad mode, TF32 and determinism flags, thread count): restored and
  flagged when changed, so the reference computed next is not affected.
- The current CUDA stream must be the one the window opened with (the timer's events are recorded there).
- The task's reference: `Task.reference` and `Task.baselines` are wrapped so that touching them inside
  a window is recorded and calling them raises. An audit hook (sys.addaudithook) records opening the
  task's files, importing the evaluator's or the task's modules, network connections, and processes
  other than the compiler toolchain. Audit hooks cannot be removed, which is why they live here.
- Python threads started in a window and still alive when it closes are flagged (a background thread
  can write outputs after the call returns; the late-write checks in ksearch.eval.judge catch that).

A failure or a state-changing flag makes the parent replace the worker after the job.
"""

from __future__ import annotations

import builtins
import math
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable

import torch

_MISSING = object()

# Replacing any of these fails the candidate: the timing and the checking depend on them.
CRITICAL: dict[str, tuple[str, ...]] = {
    "time": ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns",
             "process_time", "sleep"),
    "torch": ("equal", "isfinite", "isinf", "isnan", "where", "zeros_like", "full_like", "empty", "empty_like",
              "no_grad", "allclose", "stack", "tensor"),
    "torch.Tensor": ("clone", "copy_", "fill_", "zero_", "view", "to", "float", "cpu", "detach", "contiguous",
                     "reshape", "abs", "sum", "max", "numel", "data_ptr", "untyped_storage", "__sub__", "__gt__",
                     "__and__", "__or__", "__invert__", "__truediv__", "__add__", "__eq__", "any", "all", "item",
                     "nonzero", "tolist", "shape", "dtype", "device", "is_contiguous", "nbytes", "element_size"),
    "torch.cuda": ("synchronize", "current_stream", "default_stream", "set_stream", "stream", "Event", "Stream",
                   "current_device", "memory_snapshot", "get_device_properties"),
    "torch.cuda.Event": ("record", "elapsed_time", "synchronize", "query", "wait", "__init__", "__new__"),
    "torch.cuda.Stream": ("synchronize", "wait_event", "wait_stream", "record_event", "query"),
    "statistics": ("median",),
    "ksearch.eval.rules": ("*",),
    "ksearch.eval.timing": ("*",),
    "ksearch.eval.memory": ("*",),
    "ksearch.eval.judge": ("*",),
    "ksearch.eval.cases": ("*",),
    "ksearch.eval.baselines": ("*",),
    "ksearch.eval.noise": ("*",),
}
# Compared per window (restored and flagged): every callable these own.
BROAD = ("time", "torch", "torch.Tensor", "torch.cuda", "torch.cuda.Event", "torch.cuda.Stream", "builtins",
         "statistics", "math")
# Executables a first kernel call may legitimately start (Triton and torch extension builds).
TOOLCHAIN = {"ptxas", "nvcc", "nvlink", "fatbinary", "cuobjdump", "nvdisasm", "cc", "gcc", "g++", "c++", "clang",
             "clang++", "ld", "ninja", "ldconfig", "which", "uname", "hipcc", "ld.lld"}
_TOOLCHAIN_SUFFIXES = ("-gcc", "-g++", "-cc", "-c++", "-ld", "-clang", "-clang++")
_WATCHED = frozenset({"open", "import", "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto",
                      "urllib.Request", "http.client.connect", "subprocess.Popen", "os.system", "os.exec",
                      "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "pty.spawn", "os.kill", "os.killpg",
                      "signal.pthread_kill", "sys.settrace", "sys.setprofile", "sys.addaudithook"})


class ReferenceAccessError(RuntimeError):
    """Raised when candidate code calls the task's reference or baselines."""


@dataclass
class Findings:
    failures: list[str] = field(default_factory=list)   # tampering: the candidate fails
    flags: list[str] = field(default_factory=list)      # suspicious, undone; the candidate may still pass
    dirty: bool = False                                  # the process may carry the candidate's state

    def extend(self, other: "Findings") -> None:
        self.failures += [f for f in other.failures if f not in self.failures]
        self.flags += [f for f in other.flags if f not in self.flags]
        self.dirty = self.dirty or other.dirty


def _owner(path: str) -> Any:
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is not None:
            obj: Any = mod
            for p in parts[i:]:
                obj = getattr(obj, p, None)
                if obj is None:
                    return None
            return obj
    return None


def _members(owner: Any, callables_only: bool) -> dict[str, tuple[Any, Any]]:
    """name -> (value, where defined), without binding: classes merged along their MRO, modules by dict."""
    if isinstance(owner, type):
        merged: dict[str, tuple[Any, Any]] = {}
        for k in reversed(owner.__mro__):
            for n, v in vars(k).items():
                merged[n] = (v, k)
        return merged
    return {n: (v, owner) for n, v in vars(owner).items()
            if not callables_only or (callable(v) and not isinstance(v, ModuleType))}


Snapshot = dict[str, dict[str, tuple[Any, Any]]]


def _snapshot(paths: dict[str, tuple[str, ...] | None]) -> Snapshot:
    snap: Snapshot = {}
    for path, spec in paths.items():
        owner = _owner(path)
        if owner is None:
            continue
        members = _members(owner, callables_only=True)
        if spec and spec != ("*",):
            members = {n: members[n] for n in spec if n in members}
        snap[path] = members
    return snap


def _restore(path: str, name: str, value: Any, where: Any) -> None:
    owner = _owner(path)
    if owner is None:
        return
    try:
        if isinstance(owner, type) and where is not owner and name in owner.__dict__:
            delattr(owner, name)            # a shadowing attribute added on the subclass
        else:
            setattr(where if where is not None else owner, name, value)
    except (TypeError, AttributeError):
        pass


def _changed(snap: Snapshot) -> list[tuple[str, str, Any, Any]]:
    out = []
    for path, members in snap.items():
        owner = _owner(path)
        if owner is None:
            continue
        now = _members(owner, callables_only=False)
        for name, (value, where) in members.items():
            current = now.get(name)
            if current is None or current[0] is not value:
                out.append((path, name, value, where))
    return out


def _torch_state() -> dict[str, Any]:
    s: dict[str, Any] = {"default_dtype": torch.get_default_dtype(), "num_threads": torch.get_num_threads(),
                         "deterministic": torch.are_deterministic_algorithms_enabled(),
                         "matmul_precision": torch.get_float32_matmul_precision(),
                         "cuda_matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
                         "cudnn_tf32": torch.backends.cudnn.allow_tf32,
                         "cudnn_benchmark": torch.backends.cudnn.benchmark}
    return s


_STATE_SETTERS: dict[str, Callable[[Any], None]] = {
    "default_dtype": torch.set_default_dtype,
    "num_threads": torch.set_num_threads,
    "deterministic": torch.use_deterministic_algorithms,
    "matmul_precision": torch.set_float32_matmul_precision,
    "cuda_matmul_tf32": lambda v: setattr(torch.backends.cuda.matmul, "allow_tf32", v),
    "cudnn_tf32": lambda v: setattr(torch.backends.cudnn, "allow_tf32", v),
    "cudnn_benchmark": lambda v: setattr(torch.backends.cudnn, "benchmark", v),
}


class Guard:
    """One per worker process (`install()`); candidate code runs between `enter()` and `leave()`."""

    def __init__(self) -> None:
        self.active = False
        self._events: list[tuple[bool, str]] = []        # (is_failure, message) recorded while active
        self._protected: set[str] = set()
        self._critical = _snapshot({p: n for p, n in CRITICAL.items()})
        self._broad: Snapshot = {}
        self._state: dict[str, Any] = {}
        self._threads: set[int] = set()
        self._stream: Any = None
        self._raw_reference: Callable[[Any], Callable[..., Any]] | None = None
        self._install_task_guards()
        sys.addaudithook(self._audit)

    # ---- set-up ------------------------------------------------------------------------------------------
    def protect_dir(self, path: str | os.PathLike[str]) -> None:
        for p in {os.path.abspath(path), os.path.realpath(path)}:
            self._protected.add(p.rstrip(os.sep))

    def _install_task_guards(self) -> None:
        from ksearch.task.registry import Task

        original_ref = Task.__dict__["reference"]
        original_baselines = Task.__dict__["baselines"]
        guard = self

        def reference(task: Any) -> Callable[..., Any]:
            fn = original_ref.__get__(task, Task)
            if not guard.active:
                return fn
            guard.record("accessed the task's reference implementation (Task.reference)")

            def trap(*args: Any, **kwargs: Any) -> Any:
                guard.record("called the task's reference implementation")
                raise ReferenceAccessError("the task's reference may not be called by a candidate")
            return trap

        def baselines(task: Any) -> Any:
            if guard.active:
                guard.record("called the task's baselines (Task.baselines)")
                raise ReferenceAccessError("the task's baselines may not be used by a candidate")
            return original_baselines(task)

        Task.reference = property(reference)         # a data descriptor: the instance cache cannot bypass it
        Task.baselines = baselines
        self._raw_reference = lambda task: original_ref.__get__(task, Task)

    def reference(self, task: Any) -> Callable[..., Any]:
        """The task's reference for the evaluator's own use (never a trap)."""
        assert self._raw_reference is not None
        return self._raw_reference(task)

    # ---- recording ---------------------------------------------------------------------------------------
    def record(self, message: str, failure: bool = True) -> None:
        if (failure, message) not in self._events:
            self._events.append((failure, message))

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active or event not in _WATCHED:
            return
        try:
            self._audit_event(event, args)
        except Exception:       # an audit hook must never break the operation it observes
            pass

    def _audit_event(self, event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            path = args[0]
            if isinstance(path, int) or not self._protected:
                return
            p = os.path.abspath(os.fsdecode(path))
            if any(p == d or p.startswith(d + os.sep) for d in self._protected):
                self.record(f"opened {p} (the task's files are off limits)")
        elif event == "import":
            name = str(args[0])
            if name.startswith(("ksearch_tasks", "ksearch.task", "ksearch.eval")):
                self.record(f"imported {name} (the evaluator and the task's reference are off limits)")
        elif event.startswith(("socket.", "urllib.", "http.")):
            self.record(f"network access at run time ({event} {args[:2]!r})")
        elif event in ("subprocess.Popen", "os.posix_spawn", "os.spawn", "os.exec"):
            exe = os.path.basename(os.fsdecode(args[0])) if args and args[0] else ""
            argv = args[1] if len(args) > 1 else None
            if not exe and argv:
                exe = os.path.basename(os.fsdecode(list(argv)[0]))
            if exe not in TOOLCHAIN and not exe.endswith(_TOOLCHAIN_SUFFIXES) \
                    and not exe.startswith(("gcc-", "g++-", "clang-", "clang++-")):
                self.record(f"started a process at run time ({exe or event})", failure=False)
        elif event in ("os.system", "os.fork", "os.forkpty", "pty.spawn"):
            self.record(f"started a process at run time ({event})", failure=False)
        elif event in ("os.kill", "os.killpg", "signal.pthread_kill"):
            self.record(f"sent a signal at run time ({event} {args!r})", failure=False)
        elif event in ("sys.settrace", "sys.setprofile", "sys.addaudithook"):
            self.record(f"installed a {event.split('.')[-1][3:]} hook", failure=False)

    # ---- windows -----------------------------------------------------------------------------------------
    def enter(self) -> None:
        """Open a window: remember what candidate code must leave as it found it."""
        self._broad = _snapshot({p: None for p in BROAD})
        self._state = _torch_state()
        self._threads = {t.ident for t in threading.enumerate() if t.ident is not None}
        self._stream = torch.cuda.current_stream() if torch.cuda.is_initialized() else None
        self.active = True

    def pause(self) -> None:
        self.active = False

    def resume(self) -> None:
        self.active = True

    def leave(self) -> Findings:
        """Close the window: undo what the candidate changed and say what it was."""
        self.active = False
        f = Findings()
        for failure, message in self._events:
            (f.failures if failure else f.flags).append(message)
            f.dirty = True
        self._events.clear()
        for path, name, value, where in _changed(self._critical):
            _restore(path, name, value, where)
            f.failures.append(f"replaced {path}.{name} (timing and checking functions may not be patched)")
            f.dirty = True
        for path, name, value, where in _changed(self._broad):
            if name in self._critical.get(path, {}):
                continue
            _restore(path, name, value, where)
            f.flags.append(f"replaced {path}.{name} (put back)")
            f.dirty = True
        state = _torch_state()
        for key, value in self._state.items():
            if state.get(key) != value:
                try:
                    _STATE_SETTERS[key](value)
                except Exception:
                    pass
                f.flags.append(f"changed torch setting {key} from {value!r} to {state.get(key)!r} (put back)")
                f.dirty = True
        if self._stream is not None and torch.cuda.current_stream() != self._stream:
            torch.cuda.set_stream(self._stream)
            f.failures.append("left another CUDA stream current (the timer records its events on the current "
                              "stream; work elsewhere must be joined before returning)")
            f.dirty = True
        new = [t for t in threading.enumerate() if t.ident not in self._threads and t.is_alive()]
        if new:
            f.flags.append(f"left {len(new)} Python thread(s) running after returning "
                           f"({', '.join(t.name for t in new[:3])}); work after return is not timed")
            f.dirty = True
        return f


GUARD: Guard | None = None


def install() -> Guard:
    """Create the process's guard (idempotent). Call before any candidate code runs."""
    global GUARD
    if GUARD is None:
        GUARD = Guard()
    return GUARD


# Referenced so linters keep the imports the CRITICAL/BROAD tables name.
_ = (builtins, math, statistics, time)
