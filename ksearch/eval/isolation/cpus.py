"""The host's CPUs split between the judge and the candidates, on a GPU host with enough of them.

Measured on the H100 host (16 CPUs, 2026-12-05, scripts/stall_probe.py): torch's CPU ops run as an OpenMP
team of one thread per CPU, and a team waits for its slowest thread. With a second process spinning on one
core (CUDA's default synchronisation while a candidate waits for its graph replay), a 1 MiB copy in the
first process stalled for 2-11 ms 496 times in 4 s (3.7 s lost, against 36 ms on an idle host). In the
judge's windows the same stall landed in whichever CPU-bound phase was running - the judge copying the
outputs (up to 31 ms), the candidate generating inputs (up to 49 ms) - and made GPU scores 0.2-0.7x what
the candidate's kernel was worth, unstable from window to window.

So on a GPU host the judge keeps a few CPUs and its thread team is sized to them, and the candidates'
zygote (and every candidate forked from it) runs on the rest with a team sized to those: no team of one
process ever waits for a core that another process is spinning on. A candidate may widen its own affinity;
it then competes only with the judge's copy of its own window's outputs, inside its own clock. On a host
with fewer than MIN_CPUS CPUs (CI's 2 cores) nothing is pinned: there is nothing to split.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MIN_CPUS = 8


@dataclass(frozen=True)
class CpuSplit:
    judge: tuple[int, ...]
    candidates: tuple[int, ...]


def plan(available: set[int] | None = None, slot: int = 0, slots: int = 1) -> CpuSplit | None:
    """The split of this process's CPUs, or of the `slot`-th of `slots` equal shares of them (one per GPU when
    a worker per GPU shares the host): the judge a quarter (at least 2, at most 8), the candidates the rest;
    None below MIN_CPUS."""
    cpus = sorted(os.sched_getaffinity(0) if available is None else available)
    if slots > 1 and 0 <= slot < slots:
        share = len(cpus) // slots
        cpus = cpus[slot * share:(slot + 1) * share]
    if len(cpus) < MIN_CPUS:
        return None
    keep = min(8, max(2, len(cpus) // 4))
    return CpuSplit(tuple(cpus[:keep]), tuple(cpus[keep:]))


def gpu_slot(device: str) -> tuple[int, int]:
    """(this worker's share, shares) of the host's CPUs for a worker on `device`: one share per GPU of the host,
    so workers on different GPUs never pin onto the same CPUs. `cuda:i` with several GPUs visible: share i of
    their count; a worker that sees one GPU (Ray's actors: CUDA_VISIBLE_DEVICES=i) takes share i of the host's
    GPU device nodes; otherwise the whole host."""
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device.startswith("cuda:") and visible > 1:
        index = int(device.split(":", 1)[1])
        return (index, visible) if 0 <= index < visible else (0, 1)
    only = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible == 1 and only.isdigit():
        host = sum(1 for name in os.listdir("/dev") if name.startswith("nvidia") and name[6:].isdigit())
        if host > 1 and int(only) < host:
            return int(only), host
    return 0, 1


def run_on(cpus: tuple[int, ...] | list[int]) -> None:
    """This process (and the threads and processes it starts later) on `cpus`, with torch's thread team
    sized to them. Call before the first parallel torch op where possible (the team is made then)."""
    os.sched_setaffinity(0, set(cpus))
    import torch

    torch.set_num_threads(len(cpus))
