"""Workloads for GQA paged decode: synthesised paged indices matching the dataset's axes."""

import math

import torch

from ksearch.task import Workload
from ksearch.task.paged import decode_workload, paged_indices

NUM_QO_HEADS, NUM_KV_HEADS, HEAD_DIM = 32, 4, 128
SM_SCALE = 1.0 / math.sqrt(HEAD_DIM)


def _workload(name: str, batch: int, total: int, num_pages: int | None = None) -> Workload:
    return decode_workload(name, batch, total, num_pages or total + max(16, total // 4), SM_SCALE)


def workload_sets() -> dict[str, list[Workload]]:
    tiny = [
        _workload("tiny_b1_l7", 1, 7, 16),
        _workload("tiny_b3_l70", 3, 70, 96),
        _workload("tiny_b2_l131", 2, 131, 150),
    ]
    # K-Search's five feedback shapes (batch, total KV tokens).
    feedback = [_workload(f"fb_b{b}_t{t}", b, t) for b, t in
                [(1, 546), (16, 23079), (16, 8636), (64, 46287), (64, 28815)]]
    # The dataset's 48 workload axes: 16 each at batch 1, 16 and 64.
    b1 = [2, 7, 9, 11, 14, 40, 50, 64, 72, 87, 102, 141, 252, 362, 436, 546]
    b16 = [1020 + round(i * (23079 - 1020) / 15) for i in range(16)]
    b64 = [28815 + round(i * (61519 - 28815) / 15) for i in range(16)]
    full = ([_workload(f"full_b1_t{t}", 1, t) for t in b1]
            + [_workload(f"full_b16_t{t}", 16, t) for t in b16]
            + [_workload(f"full_b64_t{t}", 64, t) for t in b64])
    return {"tiny": tiny, "feedback": feedback, "full": full}


def make_inputs(workload: Workload, *, device: str, seed: int) -> dict:
    ax = workload.axes
    gen = torch.Generator(device=device).manual_seed(seed)
    cache_shape = (ax["num_pages"], 1, NUM_KV_HEADS, HEAD_DIM)
    q = torch.randn(ax["batch_size"], NUM_QO_HEADS, HEAD_DIM, generator=gen, device=device).to(torch.bfloat16)
    k_cache = torch.randn(cache_shape, generator=gen, device=device).to(torch.bfloat16)
    v_cache = torch.randn(cache_shape, generator=gen, device=device).to(torch.bfloat16)
    indptr, indices = paged_indices(workload.params["kv_lens"], ax["num_pages"], torch.Generator().manual_seed(seed))
    return {
        "q": q, "k_cache": k_cache, "v_cache": v_cache,
        "kv_indptr": indptr.to(device), "kv_indices": indices.to(device),
        "sm_scale": float(workload.params["sm_scale"]),
    }
