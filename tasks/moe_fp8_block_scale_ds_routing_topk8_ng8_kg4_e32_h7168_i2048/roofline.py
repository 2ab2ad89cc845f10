"""Roofline formulas for the DeepSeek-V3 FP8 block-scale MoE: the bytes any correct kernel must move and
its useful FLOPs.

Traffic: the FP8 weights and fp32 block scales of every local expert that gets at least one token,
read once; the FP8 activations and their scales, the fp32 routing logits and bf16 bias read; the bf16
output written. FLOPs: per (token, local expert) pair, GEMM1 (2I x H) and GEMM2 (H x I), 2 FLOPs per
multiply-add: 6 * H * I. Routing and the SwiGLU are negligible next to that and not counted. The
tensor-core peak that applies is FP8's (the weights and activations are FP8 with block scales).
"""

from __future__ import annotations

import functools
from pathlib import Path

from ksearch.task import Workload
from ksearch.task.registry import task_module

NUM_EXPERTS, NUM_LOCAL, BLOCK = 256, 32, 128
compute_dtype = "fp8"


def _workloads():
    return task_module(Path(__file__).parent, "workloads")


@functools.lru_cache(maxsize=256)
def _local_routing(name: str, seq_len: int, offset: int, scaling: float, hot: int | None) -> tuple[int, int]:
    """(local token-expert pairs, local experts with at least one token) of the workload's fixed routing."""
    wl = _workloads()
    logits, bias = wl._routing(name, seq_len, offset, hot)
    ids, _ = wl._reference_module().route(logits, bias, scaling)
    local = ids[(ids >= offset) & (ids < offset + NUM_LOCAL)]
    return int(local.numel()), int(local.unique().numel())


def _routing_counts(workload: Workload) -> tuple[int, int]:
    p = workload.params
    return _local_routing(workload.name, workload.axes["seq_len"], int(p["local_expert_offset"]),
                          float(p["routed_scaling_factor"]), p.get("hot_expert"))


def traffic_bytes(workload: Workload) -> int:
    t = workload.axes["seq_len"]
    hidden, inter = _workloads().sizes(workload)
    hb, ib = hidden // BLOCK, inter // BLOCK
    per_expert = 3 * hidden * inter + 4 * (2 * ib * hb + hb * ib)
    tokens = t * hidden + 4 * hb * t + 4 * NUM_EXPERTS * t + 2 * t * hidden
    return _routing_counts(workload)[1] * per_expert + tokens + 2 * NUM_EXPERTS


def flops(workload: Workload) -> int:
    hidden, inter = _workloads().sizes(workload)
    return _routing_counts(workload)[0] * 6 * hidden * inter
