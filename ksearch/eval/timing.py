"""Timing: device events with a cold L2 on a GPU, wall clock on a CPU; median of the iterations."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

_FLUSH: dict[Any, torch.Tensor] = {}


def _l2_flush_buffer(device: torch.device) -> torch.Tensor:
    if device not in _FLUSH:
        # Twice the H200's ~60 MB L2 and then some: every timed call starts from a cold cache.
        _FLUSH[device] = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device=device)
    return _FLUSH[device]


def time_cuda(fn: Callable[[], Any], *, warmup: int, iterations: int, cold_l2: bool = True) -> float:
    """Median milliseconds of `fn` over `iterations`, each bracketed by CUDA events after an L2 flush."""
    device = torch.device("cuda", torch.cuda.current_device())
    flush = _l2_flush_buffer(device) if cold_l2 else None
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    for s, e in zip(starts, ends):
        if flush is not None:
            flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def time_cpu(fn: Callable[[], Any], *, warmup: int, iterations: int) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(max(1, iterations)):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def time_call(fn: Callable[[], Any], *, device: str, warmup: int, iterations: int) -> float:
    if device.startswith("cuda"):
        return time_cuda(fn, warmup=warmup, iterations=iterations)
    return time_cpu(fn, warmup=warmup, iterations=iterations)
