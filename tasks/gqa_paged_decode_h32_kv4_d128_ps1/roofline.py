"""Roofline formulas for GQA paged decode: the bytes any correct kernel must move and its useful FLOPs.

Every referenced K and V row must be read once (bf16), q read, output (bf16) and lse (fp32) written, and
the index arrays read. Per KV token and query head: q.k and p.v, 2 * 128 FLOPs each.
"""

from ksearch.task import Workload

NUM_QO_HEADS, NUM_KV_HEADS, HEAD_DIM = 32, 4, 128
compute_dtype = "bf16"


def traffic_bytes(workload: Workload) -> int:
    ax = workload.axes
    kv = 2 * ax["num_kv_indices"] * NUM_KV_HEADS * HEAD_DIM * 2
    qo = 2 * ax["batch_size"] * NUM_QO_HEADS * HEAD_DIM * 2 + ax["batch_size"] * NUM_QO_HEADS * 4
    idx = 4 * (ax["num_kv_indices"] + ax["len_indptr"])
    return kv + qo + idx


def flops(workload: Workload) -> int:
    return 4 * HEAD_DIM * NUM_QO_HEADS * workload.axes["num_kv_indices"]
