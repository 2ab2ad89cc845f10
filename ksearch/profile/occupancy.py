"""How many warps of a kernel an SM holds at once, from the SM's limits: computed by the judge, not reported.

Occupancy = resident warps per SM / the SM's maximum. A block is resident only when the SM has room for all
of it; the first of these to run out decides how many blocks fit:

- warps: `max_warps_per_sm` in all, and at most `max_blocks_per_sm` blocks;
- registers: allocated per warp in units of `register_unit` (per-thread count x 32, rounded up);
- shared memory: per block what the kernel asks plus `smem_reserved_per_block` the CUDA runtime keeps
  (sm_80 and later), out of `smem_per_sm`; a block asking more than `smem_per_block` cannot launch.

The limits are CUDA's documented ones per compute capability (the CUDA C Programming Guide's table of
technical specifications); a capability missing from LIMITS gets no occupancy rather than a wrong one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SmLimits:
    registers_per_sm: int
    max_registers_per_thread: int
    smem_per_sm: int                    # bytes
    smem_per_block: int                 # bytes, the most one block may opt in to
    max_warps_per_sm: int
    max_blocks_per_sm: int
    register_unit: int = 256            # registers are allocated per warp in units of this many
    smem_reserved_per_block: int = 1024


KIB = 1024
#: compute capability -> limits (H100/H200 are 9.0; A100 8.0; L4/L40/RTX 40xx 8.9).
LIMITS: dict[tuple[int, int], SmLimits] = {
    (9, 0): SmLimits(65536, 255, 228 * KIB, 227 * KIB, 64, 32),
    (8, 0): SmLimits(65536, 255, 164 * KIB, 163 * KIB, 64, 32),
    (8, 6): SmLimits(65536, 255, 100 * KIB, 99 * KIB, 48, 16),
    (8, 9): SmLimits(65536, 255, 100 * KIB, 99 * KIB, 48, 24),
}


def limits_for(capability: tuple[int, int] | None) -> SmLimits | None:
    return LIMITS.get(tuple(capability)) if capability else None  # type: ignore[arg-type]  # a pair


def blocks_per_sm(registers_per_thread: int, smem_bytes: int, num_warps: int, limits: SmLimits) -> int:
    """Blocks of `num_warps` warps resident on one SM at once (0: the block cannot launch)."""
    if num_warps < 1 or num_warps > limits.max_warps_per_sm or registers_per_thread > limits.max_registers_per_thread \
            or smem_bytes > limits.smem_per_block or registers_per_thread < 0 or smem_bytes < 0:
        return 0
    by_warps = min(limits.max_blocks_per_sm, limits.max_warps_per_sm // num_warps)
    per_warp = math.ceil(registers_per_thread * 32 / limits.register_unit) * limits.register_unit
    by_registers = limits.registers_per_sm // (per_warp * num_warps) if per_warp else by_warps
    by_smem = limits.smem_per_sm // (smem_bytes + limits.smem_reserved_per_block) if smem_bytes else by_warps
    return max(0, min(by_warps, by_registers, by_smem))


def occupancy(registers_per_thread: int, smem_bytes: int, num_warps: int, limits: SmLimits) -> float:
    """Resident warps per SM over the SM's maximum, 0..1."""
    blocks = blocks_per_sm(registers_per_thread, smem_bytes, num_warps, limits)
    return min(1.0, blocks * num_warps / limits.max_warps_per_sm)
