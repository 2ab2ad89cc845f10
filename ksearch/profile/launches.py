"""The GPU work of one call, launch by launch: a torch.profiler (CUPTI) pass in the candidate's process.

Run untimed, after the judge's clock is done with a workload: nothing here is a measurement the score uses.
The judge bounds what comes back (ksearch.profile.collect): at most MAX_LAUNCHES launches, and a sum of GPU
times no larger than its own clock allows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

MAX_LAUNCHES = 64
MAX_NAME = 200


@dataclass(frozen=True)
class GpuSpan:
    """One activity the profiler saw: its name, its kind (CUPTI's activity type), on the GPU or not, when."""

    name: str
    activity: str
    on_gpu: bool
    start_ns: int
    duration_ns: int


def launches_from_spans(spans: Iterable[GpuSpan]) -> list[tuple[str, float]]:
    """(kernel name, GPU µs) per piece of GPU work (kernels, memsets, copies) in start order; annotations
    and host-side activity are left out. At most MAX_LAUNCHES."""
    work = sorted((s for s in spans if s.on_gpu and "annotation" not in s.activity.lower() and s.duration_ns >= 0),
                  key=lambda s: s.start_ns)
    return [(s.name[:MAX_NAME], s.duration_ns / 1e3) for s in work[:MAX_LAUNCHES]]


def _kineto_spans(prof: Any) -> list[GpuSpan]:
    import torch

    results = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    if results is None:
        return []
    spans = []
    for e in results.events():
        spans.append(GpuSpan(str(e.name()), str(e.activity_type() if hasattr(e, "activity_type") else ""),
                             e.device_type() == torch.autograd.DeviceType.CUDA, int(e.start_ns()),
                             int(e.duration_ns())))
    return spans


def profile_call(call: Callable[[], Any], sync: Callable[[], Any], flush: Callable[[], Any],
                 activities: tuple[str, ...] = ("CUDA",)) -> list[tuple[str, float]]:
    """One call, L2 flushed before it, under the profiler's CUDA activity: its launches and their GPU µs.
    (`activities`: ProfilerActivity names; a test on a CPU adds "CPU", which records no launches.)"""
    from torch.profiler import ProfilerActivity, profile

    flush()
    sync()
    with profile(activities=[getattr(ProfilerActivity, a) for a in activities]) as prof:
        result = call()
        sync()
    del result
    return launches_from_spans(_kineto_spans(prof))
