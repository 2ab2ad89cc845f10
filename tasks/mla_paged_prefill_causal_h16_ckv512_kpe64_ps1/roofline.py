"""Roofline formulas for causal MLA paged prefill: the bytes any correct kernel must move and its useful FLOPs.

Traffic: every referenced ckv and kpe row read once (bf16), q read, output (bf16) and lse (fp32)
written, kv_indices plus both indptr arrays read. FLOPs: only the (query, key) pairs the causal mask
keeps (query i of a sequence sees its first kv_len - q_len + i + 1 keys), times 16 heads, times
q.k over 576 dims and p.v over 512 (2 FLOPs per multiply-add).
"""

from ksearch.task import Workload

NUM_QO_HEADS, HEAD_DIM_CKV, HEAD_DIM_KPE = 16, 512, 64
compute_dtype = "bf16"


def traffic_bytes(workload: Workload) -> int:
    ax = workload.axes
    kv = ax["num_kv_indices"] * (HEAD_DIM_CKV + HEAD_DIM_KPE) * 2
    q = ax["total_q"] * NUM_QO_HEADS * (HEAD_DIM_CKV + HEAD_DIM_KPE) * 2
    out = ax["total_q"] * NUM_QO_HEADS * (HEAD_DIM_CKV * 2 + 4)
    idx = 4 * (ax["num_kv_indices"] + 2 * ax["len_indptr"])
    return kv + q + out + idx


def causal_pairs(q_lens: list[int], kv_lens: list[int]) -> int:
    """(query, key) pairs left by the bottom-right-aligned causal mask."""
    return sum(q * (kv - q) + q * (q + 1) // 2 for q, kv in zip(q_lens, kv_lens))


def flops(workload: Workload) -> int:
    if "q_lens" in workload.params:
        pairs = causal_pairs(workload.params["q_lens"], workload.params["kv_lens"])
    else:   # a dataset workload without per-sequence lengths: each query sees at least its own key
        pairs = workload.axes["total_q"]
    per_pair = 2 * (HEAD_DIM_CKV + HEAD_DIM_KPE) + 2 * HEAD_DIM_CKV
    return per_pair * NUM_QO_HEADS * pairs
