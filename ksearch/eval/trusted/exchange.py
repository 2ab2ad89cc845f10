"""Memory the judge shares with a candidate for one request: inputs revealed at "go", outputs that start as NaN.

Why: the candidate's process must not hold a workload's inputs before the judge's clock starts, and must not
be able to answer "done" before its outputs exist. For every call it times, the judge creates a fresh
anonymous memory file (memfd), writes the inputs into it, fills the output slots with 0xFF bytes (NaN in
every float format, -1 in every integer), *then* starts its clock and sends the request together with the
file's descriptor (SCM_RIGHTS). Until that moment the memory exists in no process but the judge's: there is
nothing to read early, no hook that could see it, no file name to open. The candidate maps it, calls the
kernel, copies the outputs into the slots and answers; the judge copies the slots out (its clock stops
there) and verifies that copy. A reply sent early, or by a thread before the work is done, finds NaN; an
input the call changed is seen by comparing the input slots with the judge's own copy, while the candidate's
process stands still (ksearch.eval.trusted.judge stops it from its reply until that comparison is done).

Layout: every tensor is contiguous at a 64-byte aligned offset (dtype and shape are in the `Layout`, which
travels pickled in the request: the judge -> candidate direction is trusted); scalar inputs travel in the
layout itself. On a GPU only output slots are shared (the inputs are revealed as seeds; see
ksearch.eval.trusted.judge), so a layout may hold no inputs.
"""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

ALIGN = 64
UNWRITTEN = 0xFF            # NaN in fp32/bf16/fp16/fp8, -1 in integers: "the candidate never wrote this"
_FD_MARK = b"F"

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool, "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2,
}
_NAMES = {v: k for k, v in _DTYPES.items()}


class ExchangeError(ValueError):
    """A value cannot be placed in shared memory (an unsupported dtype or type)."""


@dataclass(frozen=True)
class Slot:
    """One contiguous tensor in the shared file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * torch.empty((), dtype=self.torch_dtype).element_size()


@dataclass(frozen=True)
class Layout:
    """Where each input and output lives in the shared file, and the scalar inputs by value."""

    order: tuple[str, ...]                      # input names in call order
    inputs: tuple[Slot, ...]
    scalars: tuple[tuple[str, Any], ...]
    outputs: tuple[Slot, ...]
    size: int

    @property
    def output_bytes(self) -> list[int]:
        return [s.nbytes for s in self.outputs]


def _dtype_name(t: torch.Tensor) -> str:
    name = _NAMES.get(t.dtype)
    if name is None:
        raise ExchangeError(f"a tensor of {t.dtype} cannot be shared (supported: {', '.join(_DTYPES)})")
    return name


def plan(inputs: dict[str, Any] | None, order: Sequence[str], outputs: Sequence[torch.Tensor],
         output_names: Sequence[str]) -> Layout:
    """The layout for these inputs (None: outputs only) and outputs shaped like `outputs`."""
    offset = 0
    in_slots: list[Slot] = []
    scalars: list[tuple[str, Any]] = []

    def place(name: str, t: torch.Tensor) -> Slot:
        nonlocal offset
        slot = Slot(name, _dtype_name(t), tuple(int(s) for s in t.shape), offset)
        offset += -(-max(slot.nbytes, 1) // ALIGN) * ALIGN
        return slot

    if inputs is not None:
        for name in order:
            value = inputs[name]
            if isinstance(value, torch.Tensor):
                in_slots.append(place(name, value))
            elif value is None or isinstance(value, (bool, int, float, str)):
                scalars.append((name, value))
            else:
                raise ExchangeError(f"input {name} is a {type(value).__name__}; only tensors and scalars are "
                                    f"shared")
    for name, t in zip(output_names, outputs):
        if not isinstance(t, torch.Tensor):
            raise ExchangeError(f"output {name} is a {type(t).__name__}; only tensor outputs have slots")
    out_slots = [place(name, t) for name, t in zip(output_names, outputs)]
    return Layout(tuple(order) if inputs is not None else (), tuple(in_slots), tuple(scalars), tuple(out_slots),
                  max(offset, ALIGN))


def _view(buf: Any, slot: Slot) -> torch.Tensor:
    if slot.nbytes == 0:
        return torch.empty(slot.shape, dtype=slot.torch_dtype)
    raw = torch.frombuffer(buf, dtype=torch.uint8, count=slot.nbytes, offset=slot.offset)
    return raw.view(slot.torch_dtype).view(slot.shape)


def _raw(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


class SharedCall:
    """(Judge side) one request's shared file: inputs written, outputs unwritten, a descriptor to hand over."""

    def __init__(self, layout: Layout, inputs: dict[str, Any] | None = None):
        self.layout = layout
        fd = os.memfd_create("ksearch-exchange", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        self.fd: int | None = fd
        try:
            os.ftruncate(fd, layout.size)
            # Its size is fixed for good: a candidate that shrank the file would make the judge's own
            # reads of its mapping fault (SIGBUS) instead of failing the candidate.
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            self._mm: mmap.mmap | None = mmap.mmap(fd, layout.size)
        except BaseException:
            os.close(fd)
            raise
        self._inputs = [_view(self._mm, s) for s in layout.inputs]
        self._outputs = [_view(self._mm, s) for s in layout.outputs]
        for slot, view in zip(layout.inputs, self._inputs):
            if slot.nbytes:
                view.copy_(inputs[slot.name].detach().to("cpu"))  # type: ignore[index]  # input slots: inputs given
        for view in self._outputs:
            if view.numel():
                _raw(view).fill_(UNWRITTEN)

    def hand_over(self, sock: socket.socket) -> None:
        """Send the descriptor (after the request itself); the judge keeps only its mapping."""
        fd, self.fd = self.fd, None
        if fd is None:
            raise ExchangeError("this call's descriptor was handed over already")
        try:
            socket.send_fds(sock, [_FD_MARK], [fd])
        finally:
            os.close(fd)

    @property
    def output_slots(self) -> list[torch.Tensor]:
        """The judge's own view of the output slots (for measuring what filling them costs)."""
        return list(self._outputs)

    def take_outputs(self) -> list[torch.Tensor]:
        """The judge's own copy of every output slot, as it is now."""
        return [v.clone() for v in self._outputs]

    def changed_input(self, pristine: dict[str, Any]) -> str | None:
        """The first input whose shared bytes differ from the judge's copy (the call modified it)."""
        for slot, view in zip(self.layout.inputs, self._inputs):
            want = pristine[slot.name].detach().to("cpu").contiguous()
            if view.numel() and not torch.equal(_raw(view), _raw(want)):
                return slot.name
        return None

    def close(self) -> None:
        self._inputs, self._outputs = [], []
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        mm, self._mm = self._mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:         # a view is still referenced somewhere: the mapping dies with it
                pass

    def __enter__(self) -> SharedCall:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_POPULATE = getattr(mmap, "MAP_POPULATE", 0)      # Linux only; elsewhere the pages fault in as they are written


class Mapped:
    """(Candidate side) the shared file of one request, as tensors: inputs in call order, output slots."""

    def __init__(self, fd: int, layout: Layout):
        # Every page mapped at once (MAP_POPULATE) rather than faulted in one by one by the output copy: the
        # judge wrote the slots, so the pages exist, and each window's file is new to this process. Copying
        # 537 MB into a fresh mapping took 107 ms, 15 + 44 ms populated (CPU, 2026-12-06); the same copy
        # from the GPU cost a prefill candidate's window ~7x the judge's own (H100).
        self._mm: mmap.mmap | None = mmap.mmap(fd, layout.size, flags=mmap.MAP_SHARED | _POPULATE)
        by_name: dict[str, Any] = dict(layout.scalars)
        for slot in layout.inputs:
            by_name[slot.name] = _view(self._mm, slot)
        self.inputs: list[Any] = [by_name[n] for n in layout.order]
        self.outputs: list[torch.Tensor] = [_view(self._mm, s) for s in layout.outputs]

    def close(self) -> None:
        self.inputs, self.outputs = [], []
        mm, self._mm = self._mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:         # the kernel kept a view of its inputs: the mapping dies with it
                pass


def receive_fd(sock: socket.socket) -> int:
    """(Candidate side) the descriptor the judge sent right after a request."""
    data, fds, _, _ = socket.recv_fds(sock, 1, 1)
    if data != _FD_MARK or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise EOFError("expected the request's shared memory")
    return fds[0]
