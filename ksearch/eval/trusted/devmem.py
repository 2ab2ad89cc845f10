"""The judge's view of device memory: what is free on the GPU (every process counted), what its own work
took at its peak, and giving its caching allocator's unused blocks back.

Used only in the trusted worker (ksearch.eval.trusted.judge): how many timing input sets a workload gets is
sized from these readings, never from anything a candidate's process reports. Off a GPU every reading is
None and every release a no-op, so the judge falls back to its fixed caps.

Why it matters: PyTorch's caching allocator keeps what a process freed reserved for that process. The judge
computes references (GQA decode's `full_ragged40_l30-180000`: ~46 GiB at its peak, every sequence padded to
180k tokens in fp32) and then waits while a candidate's process runs; reserved but unused, that memory left
the candidate 0.8 GiB of an 80 GB H100, and every kernel failed that workload out of memory (H100, session 25).
The reference's text is part of every prompt of its task, so a recorded run replays only against the same text
(tests/test_old_runs.py): it stays as it is, and the judge measures and gives back what it takes instead.
"""

from __future__ import annotations

from types import TracebackType

import torch


def _cuda(device: str) -> bool:
    return str(device).startswith("cuda") and torch.cuda.is_available()


def free_bytes(device: str) -> int | None:
    """Free memory on the device as the driver counts it (all processes), or None where it cannot be read."""
    if not _cuda(device):
        return None
    try:
        free, _total = torch.cuda.mem_get_info(torch.device(device))
    except Exception:  # noqa: BLE001 - no reading: the caller keeps its fixed caps
        return None
    return int(free)


def release(device: str) -> None:
    """Give this process's cached, unused allocator blocks back to the driver (other processes can use them)."""
    if _cuda(device) and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


class Peak:
    """Around a block of this process's own GPU work: `peak`, the most it allocated at once beyond what was
    allocated on entry, and `kept`, what it still holds on exit (both None off a GPU).
    Resets the allocator's peak statistic (nothing else in the judge reads it)."""

    def __init__(self, device: str):
        self.device = device
        self.peak: int | None = None
        self.kept: int | None = None
        self._base = 0

    def __enter__(self) -> Peak:
        if _cuda(self.device):
            dev = torch.device(self.device)
            torch.cuda.reset_peak_memory_stats(dev)
            self._base = torch.cuda.memory_allocated(dev)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if kind is None and _cuda(self.device):
            dev = torch.device(self.device)
            self.peak = max(0, torch.cuda.max_memory_allocated(dev) - self._base)
            self.kept = max(0, torch.cuda.memory_allocated(dev) - self._base)


def gib(n: int | float) -> str:
    """Bytes in GiB, as messages show them."""
    return f"{n / 2**30:.2f} GiB"
