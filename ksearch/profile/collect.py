"""The judge's side of a profile: what the candidate's process reported, validated and bounded, plus what
the judge knows itself (occupancy from the GPU's limits, its own clock, the task's physical floor).

Everything from the candidate's process is untrusted advice: a field of the wrong type or out of range is
dropped (None), lists are cut to a fixed length, and launches whose GPU times add up to more than the judge's
own clock allows for one call are dropped with a note. None of it touches a verdict or a score.
"""

from __future__ import annotations

import math
from typing import Any

from ksearch.profile.launches import MAX_LAUNCHES, MAX_NAME
from ksearch.profile.model import KernelInfo, Launch, Profile, WorkloadProfile
from ksearch.profile.occupancy import SmLimits, occupancy
from ksearch.profile.triton_cache import MAX_KERNELS

#: The launches of one profiled call may add up to this much more than the judge's median GPU time per call
#: (or 3 spreads, when larger), plus LAUNCH_SLACK_US: one untimed call is noisier than a median of windows.
LAUNCH_SLACK = 0.5
LAUNCH_SLACK_US = 5.0
MAX_LAUNCH_US = 1e8

_RANGES = {"registers_per_thread": (0, 255), "spilled_bytes": (0, 1 << 24), "shared_memory_bytes": (0, 1 << 24),
           "num_warps": (1, 32), "num_stages": (1, 64)}


def _name(v: Any) -> str | None:
    if not isinstance(v, str) or not v:
        return None
    clean = "".join(ch if ch.isprintable() else "?" for ch in v[:MAX_NAME])
    return clean or None


def _bounded_int(v: Any, lo: int, hi: int) -> int | None:
    return v if type(v) is int and lo <= v <= hi else None


def kernels_from_reply(raw: Any, limits: SmLimits | None) -> list[KernelInfo]:
    """The compiled kernels the candidate's process reported, each field checked; occupancy computed here."""
    if not isinstance(raw, list):
        return []
    out: list[KernelInfo] = []
    seen: set[str] = set()
    for item in raw[:MAX_KERNELS]:
        name = _name(item.get("name")) if isinstance(item, dict) else None
        if name is None or name in seen:
            continue
        seen.add(name)
        fields = {k: _bounded_int(item.get(k), lo, hi) for k, (lo, hi) in _RANGES.items()}
        occ = None
        regs, smem, warps = fields["registers_per_thread"], fields["shared_memory_bytes"], fields["num_warps"]
        if limits is not None and regs is not None and smem is not None and warps is not None:
            occ = occupancy(regs, smem, warps, limits)
        out.append(KernelInfo(name=name, occupancy=occ, **fields))
    return out


def launches_from_reply(raw: Any) -> tuple[list[Launch], str]:
    """The launches of one call as reported, or [] and why they cannot be read."""
    if not isinstance(raw, list):
        return [], "the profile pass reported no launches"
    if len(raw) > MAX_LAUNCHES:
        return [], f"the profile pass reported {len(raw)} launches, more than the {MAX_LAUNCHES} one call may show"
    out = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 2):
            return [], "a launch is not a (kernel, GPU µs) pair"
        name, us = _name(item[0]), item[1]
        if name is None or isinstance(us, bool) or not isinstance(us, (int, float)) or not math.isfinite(us) \
                or not 0 <= us <= MAX_LAUNCH_US:
            return [], "a launch has no kernel name or no finite GPU time"
        out.append(Launch(kernel=name, gpu_time_us=float(us)))
    return out, ""


def workload_profile(workload: str, launches: list[Launch], gpu_time_ms: float | None, spread: float | None,
                     floor_ms: float | None) -> tuple[WorkloadProfile, str]:
    """One workload's row: the launches when the judge's clock allows their sum, and % of the physical limit
    from the judge's own GPU time. Returns the row and a note ("" when nothing was dropped)."""
    note = ""
    if launches and gpu_time_ms is not None and gpu_time_ms > 0:
        total = sum(x.gpu_time_us for x in launches)
        allowed = gpu_time_ms * 1e3 * (1 + max(LAUNCH_SLACK, 3 * (spread or 0.0))) + LAUNCH_SLACK_US
        if total > allowed:
            note = (f"{workload}: launches dropped: they add up to {total:.3g} µs, more than the judge's "
                    f"{gpu_time_ms * 1e3:.3g} µs per call allows")
            launches = []
    elif launches:
        note, launches = f"{workload}: launches dropped: the judge has no GPU time to bound them by", []
    pct = None
    if floor_ms and gpu_time_ms and gpu_time_ms > 0:
        pct = 100.0 * floor_ms / gpu_time_ms
    return WorkloadProfile(workload=workload, launches=launches, floor_us=floor_ms * 1e3 if floor_ms else None,
                           pct_of_limit=pct), note


def assemble(kernels: list[KernelInfo], workloads: list[WorkloadProfile]) -> Profile:
    """The profile; when launches were recorded, only the kernels some call launched (a cache also holds
    kernels compiled for other reasons, such as the evaluator's own warm-up kernel)."""
    launched = {x.kernel for w in workloads for x in w.launches}
    if launched:
        kernels = [k for k in kernels if k.name in launched]
    return Profile(kernels=kernels, workloads=workloads)
