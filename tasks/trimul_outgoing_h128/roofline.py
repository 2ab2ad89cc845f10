"""Roofline formulas for TriMul: the bytes any kernel must move and its useful FLOPs (fp16 tensor cores:
mixed precision inside the kernel is allowed, so the half-precision peak is the limit that applies)."""

from ksearch.task import Workload

H = 128
compute_dtype = "bf16"       # the fp16 and bf16 dense tensor peaks are the same on Hopper


def flops(workload: Workload) -> int:
    """Multiply-adds x 2: five projections, the S^3 contraction and the output projection."""
    b, s, d = (int(workload.axes[k]) for k in ("B", "S", "D"))
    return 2 * b * s ** 3 * H + 2 * b * s * s * d * H * 5 + 2 * b * s * s * H * d


def traffic_bytes(workload: Workload) -> int:
    """The least a kernel must move: read x and the mask, write out (fp32), read the weights once."""
    b, s, d = (int(workload.axes[k]) for k in ("B", "S", "D"))
    weights = 4 * (2 * d + 5 * H * d + 2 * H + d * H)
    return 4 * b * s * s * (2 * d + 1) + weights
