"""Roofline formulas for MLA paged decode: the bytes any correct kernel must move and its useful FLOPs.

Every referenced ckv and kpe row read once (bf16), q read, output (bf16) and lse (fp32) written, the
index arrays read. Per KV token and head: q.k over 576 dims (512 ckv + 64 kpe) and p.v over 512.
"""

from ksearch.task import Workload

NUM_QO_HEADS, HEAD_DIM_CKV, HEAD_DIM_KPE = 16, 512, 64
compute_dtype = "bf16"


def traffic_bytes(workload: Workload) -> int:
    ax = workload.axes
    kv = ax["num_kv_indices"] * (HEAD_DIM_CKV + HEAD_DIM_KPE) * 2
    q = ax["batch_size"] * NUM_QO_HEADS * (HEAD_DIM_CKV + HEAD_DIM_KPE) * 2
    out = ax["batch_size"] * NUM_QO_HEADS * (HEAD_DIM_CKV * 2 + 4)
    idx = 4 * (ax["num_kv_indices"] + ax["len_indptr"])
    return kv + q + out + idx


def flops(workload: Workload) -> int:
    per_pair = 2 * (HEAD_DIM_CKV + HEAD_DIM_KPE) + 2 * HEAD_DIM_CKV
    return per_pair * NUM_QO_HEADS * workload.axes["num_kv_indices"]
