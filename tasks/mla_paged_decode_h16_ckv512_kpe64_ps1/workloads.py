"""Workloads for MLA paged decode: synthesised paged indices matching the dataset's axes.

Every dataset workload uses SGLang's whole token pool as the cache (num_pages = 989,669 rows) and
sm_scale = 0.1352337747812271. The `tiny` set shrinks num_pages so the CPU interpreter stays fast.
"""

import torch

from ksearch.task import Workload
from ksearch.task.paged import decode_workload, paged_indices

NUM_QO_HEADS, HEAD_DIM_CKV, HEAD_DIM_KPE = 16, 512, 64
SM_SCALE = 0.1352337747812271
POOL_PAGES = 989_669


def _workload(name: str, batch: int, total: int, num_pages: int = POOL_PAGES) -> Workload:
    return decode_workload(name, batch, total, num_pages, SM_SCALE)


def workload_sets() -> dict[str, list[Workload]]:
    tiny = [
        _workload("tiny_b1_l9", 1, 9, 40),
        _workload("tiny_b3_l150", 3, 150, 300),
        _workload("tiny_b5_l97", 5, 97, 200),
    ]
    # K-Search's five feedback shapes (batch, total KV tokens).
    feedback = [_workload(f"fb_b{b}_t{t}", b, t) for b, t in
                [(16, 14857), (16, 17257), (1, 2408), (16, 12857), (64, 62345)]]
    # The dataset's 47 workload axes: 15 at batch 1 (exact lengths), 16 each at batch 16 and 64
    # (total tokens spread evenly over the documented ranges).
    b1 = [8, 108, 208, 308, 408, 508, 608, 708, 808, 1008, 1108, 1208, 1908, 2408, 2708]
    b16 = [457 + round(i * (17257 - 457) / 15) for i in range(16)]
    b64 = [9945 + round(i * (75145 - 9945) / 15) for i in range(16)]
    full = ([_workload(f"full_b1_t{t}", 1, t) for t in b1]
            + [_workload(f"full_b16_t{t}", 16, t) for t in b16]
            + [_workload(f"full_b64_t{t}", 64, t) for t in b64])
    return {"tiny": tiny, "feedback": feedback, "full": full}


def make_inputs(workload: Workload, *, device: str, seed: int) -> dict:
    ax = workload.axes
    gen = torch.Generator(device=device).manual_seed(seed)
    batch, pages = ax["batch_size"], ax["num_pages"]
    bf16 = torch.bfloat16
    # Drawn directly in bf16: the pool is ~1 GB of bf16 and an fp32 staging copy would double it.
    q_nope = torch.randn(batch, NUM_QO_HEADS, HEAD_DIM_CKV, generator=gen, device=device, dtype=bf16)
    q_pe = torch.randn(batch, NUM_QO_HEADS, HEAD_DIM_KPE, generator=gen, device=device, dtype=bf16)
    ckv_cache = torch.randn(pages, 1, HEAD_DIM_CKV, generator=gen, device=device, dtype=bf16)
    kpe_cache = torch.randn(pages, 1, HEAD_DIM_KPE, generator=gen, device=device, dtype=bf16)
    indptr, indices = paged_indices(workload.params["kv_lens"], pages, torch.Generator().manual_seed(seed))
    return {
        "q_nope": q_nope, "q_pe": q_pe, "ckv_cache": ckv_cache, "kpe_cache": kpe_cache,
        "kv_indptr": indptr.to(device), "kv_indices": indices.to(device),
        "sm_scale": float(workload.params["sm_scale"]),
    }
