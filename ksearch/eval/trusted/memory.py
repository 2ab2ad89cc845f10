"""Memory hygiene in the worker: scrub freed memory before checked calls; cap a CPU worker's memory.

Kernels return freshly allocated outputs. An allocation can land on memory that held an earlier result
(the CUDA caching allocator and glibc malloc both reuse freed blocks without clearing them), so a kernel
that leaves elements unwritten could inherit plausible values. Before each checked call we fill the
memory the next allocations would receive with 0xFF bytes: NaN in every float format (fp32, bf16, fp16,
fp8 e4m3fn/e5m2) and -1 in integers, so an unwritten element fails the check as a non-finite value.

- CUDA: every inactive (cached, free) block of the caching allocator, taken from its snapshot, is
  allocated at its exact size, filled and released; then blocks of each output's size are added too.
- CPU: blocks of each output's size are allocated, filled and freed (glibc hands recently freed chunks
  of a size back first). Large blocks come from fresh mmap'd pages (zeros), which are wrong values too.

The references of check calls are computed after the candidate's call, so no correct answer for those
inputs exists in memory while it runs; scrubbing makes "unwritten" fail loudly rather than by luck.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterable

import torch

MAX_SCRUB_BLOCKS = 4096


def scrub(device: str, output_bytes: Iterable[int]) -> None:
    sizes = [int(n) for n in output_bytes if n > 0]
    if device.startswith("cuda"):
        _scrub_cuda(sizes)
    else:
        _scrub_cpu(sizes)


def _scrub_cpu(sizes: list[int]) -> None:
    hold = []
    for n in sizes:
        for _ in range(2):
            t = torch.empty(n, dtype=torch.uint8)
            t.fill_(0xFF)
            hold.append(t)
    del hold


def _scrub_cuda(sizes: list[int]) -> None:
    try:
        blocks = [b["size"] for seg in torch.cuda.memory_snapshot() for b in seg.get("blocks", [])
                  if b.get("state") == "inactive"]
    except Exception:           # noqa: BLE001 - an allocator without snapshots: fall back to output-sized blocks
        blocks = []
    hold = []
    for n in sorted(blocks, reverse=True)[:MAX_SCRUB_BLOCKS] + [n for n in sizes for _ in range(2)]:
        try:
            t = torch.empty(n, dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError:
            break
        t.fill_(0xFF)
        hold.append(t)
    del hold                    # back to the cache, now full of 0xFF; fills are ordered before later kernels


def physical_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def default_cpu_limit_bytes() -> int | None:
    """Address-space cap for a CPU worker: 3/4 of RAM, at least 8 GiB (torch reserves address space)."""
    phys = physical_memory_bytes()
    return max(8 << 30, phys * 3 // 4) if phys else None


def limit_process(address_space_bytes: int | None) -> None:
    """No core dumps (a segfaulting candidate must not write gigabytes); optionally cap the address space.

    The cap turns a runaway host allocation into a MemoryError/RuntimeError inside the worker rather
    than the kernel's OOM killer picking a victim. Not used with CUDA, which maps far more address space
    than it uses.
    """
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):
        pass
    if address_space_bytes:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes, address_space_bytes))
        except (ValueError, OSError):
            pass
