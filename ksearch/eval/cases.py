"""Inputs and references for judging, shared by the candidate checks and the baseline timing.

`Case` holds one workload's pristine input sets (fresh seeds per job), the buffers candidates are
called with (sets are copied into them in place, so the addresses never change), and the references,
computed only when asked, i.e. after the calls they check. `baseline_case` holds the fixed inputs the
baselines are timed on. The bitwise helpers compare outputs and inputs NaN-safely, and `plain` refuses
torch.Tensor subclasses before the evaluator calls a single method on one.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import torch

from ksearch.eval import integrity
from ksearch.eval.rules import normalize_outputs
from ksearch.task import Task, Workload, load_task

_synchronize = torch.cuda.synchronize

_TASKS: dict[str, Task] = {}
_CASES: dict[tuple[str, str, int, str], tuple[dict[str, Any], list[Any]]] = {}


def get_task(name: str, root: str | None) -> Task:
    if name not in _TASKS:
        _TASKS[name] = load_task(name, Path(root) if root else None)
    return _TASKS[name]


def reference_of(task: Task) -> Callable[..., Any]:
    g = integrity.GUARD
    return g.reference(task) if g is not None else task.reference


def select_device(device: str) -> None:
    """Make cuda:N current, so events, streams and the L2 flush live where the tensors do."""
    if device.startswith("cuda") and ":" in device:
        torch.cuda.set_device(torch.device(device))


def sync(device: str) -> None:
    if device.startswith("cuda"):
        _synchronize()


def baseline_case(task: Task, w: Workload, seed: int, device: str) -> tuple[dict[str, Any], list[Any]]:
    """Fixed inputs (run seed) and their reference outputs for timing baselines; cached per worker."""
    key = (task.name, w.name, seed, device)
    if key not in _CASES:
        if len(_CASES) > 8:     # bounded: MLA inputs hold a ~1 GB cache each
            _CASES.pop(next(iter(_CASES)))
        inputs = task.make_inputs(w, device=device, seed=w.input_seed(seed))
        with torch.no_grad():
            ref = normalize_outputs(reference_of(task)(**inputs), task.definition.output_names)
        _CASES[key] = (inputs, ref)
    return _CASES[key]


# ---- tensors ------------------------------------------------------------------------------------------
def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def same_bytes(a: Any, b: Any) -> bool:
    """Bitwise equality (NaN-safe) for tensors; identity otherwise (never a candidate object's __eq__)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.numel() == 0:
            return True
        return bool(torch.equal(_as_bytes(a), _as_bytes(b).to(a.device)))
    return a is b


def plain(outs: list[Any], names: list[str]) -> list[Any]:
    """The outputs, refusing torch.Tensor subclasses: their methods could fake the snapshot and the checks,
    so the evaluator never calls into one."""
    for n, o in zip(names, outs):
        if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor:    # noqa: E721
            raise TypeError(f"output {n} is a {type(o).__name__}, a torch.Tensor subclass; return plain tensors")
    return outs


def snapshot(outs: list[Any]) -> list[Any]:
    return [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in outs]


def storage_of(t: Any) -> int | None:
    if not isinstance(t, torch.Tensor) or t.numel() == 0:
        return None
    try:
        return t.untyped_storage().data_ptr()
    except Exception:
        return t.data_ptr()


# ---- per-workload inputs ------------------------------------------------------------------------------
class Case:
    """Pristine input sets for one workload (fresh seeds), one set of buffers the candidates are called
    with (sets are copied in place), and references computed on demand, after the calls they check."""

    def __init__(self, task: Task, w: Workload, device: str, nonce: int):
        self.task, self.w, self.device, self.nonce = task, w, device, nonce
        self.names = task.definition.input_names
        self.sets: dict[int, dict[str, Any]] = {}
        self.refs: dict[int, list[Any]] = {}
        self.buffers: dict[str, Any] | None = None
        self.arg_list: list[Any] = []
        self.loaded: int | None = None
        axes = {**task.definition.const_axes(), **w.axes}
        self.output_bytes: list[int] = []
        for spec in task.definition.outputs:
            try:
                n = math.prod(spec.concrete_shape(axes)) if not spec.is_scalar else 1
                self.output_bytes.append(n * torch.empty((), dtype=spec.torch_dtype).element_size())
            except (KeyError, ValueError):
                pass

    def seed(self, k: int) -> int:
        return self.w.input_seed(self.nonce, k)

    def inputs(self, k: int) -> dict[str, Any]:
        if k not in self.sets:
            self.sets[k] = self.task.make_inputs(self.w, device=self.device, seed=self.seed(k))
        return self.sets[k]

    def load(self, k: int) -> None:
        """Copy input set k into the buffers (allocated on first use); asynchronous on a GPU."""
        src = self.inputs(k)
        if self.buffers is None:
            self.buffers = {n: (v.clone() if isinstance(v, torch.Tensor) else v) for n, v in src.items()}
        else:
            for n, v in src.items():
                b = self.buffers[n]
                if isinstance(v, torch.Tensor) and isinstance(b, torch.Tensor) and b.shape == v.shape \
                        and b.dtype == v.dtype:
                    b.copy_(v)
                else:
                    self.buffers[n] = v.clone() if isinstance(v, torch.Tensor) else v
        self.arg_list = [self.buffers[n] for n in self.names]
        self.loaded = k

    def modified_input(self, k: int) -> str | None:
        """The name of the first buffer that no longer equals input set k."""
        assert self.buffers is not None
        src = self.inputs(k)
        for n in self.names:
            if isinstance(src[n], torch.Tensor) and not same_bytes(self.buffers[n], src[n]):
                return n
        return None

    def reference(self, k: int) -> list[Any]:
        if k not in self.refs:
            with torch.no_grad():
                self.refs[k] = normalize_outputs(reference_of(self.task)(**self.inputs(k)),
                                                 self.task.definition.output_names)
            sync(self.device)
        return self.refs[k]
