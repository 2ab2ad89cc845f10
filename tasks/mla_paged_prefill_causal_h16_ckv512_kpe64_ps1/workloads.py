"""Workloads for causal MLA paged prefill: synthesised q/kv splits matching the dataset's axes.

Every dataset workload is a (total_q, batch, total_kv) triple with num_pages = 989,669 (SGLang's whole
token pool) and sm_scale = 0.1352337747812271. Each sequence gets q_len >= 1 and kv_len >= q_len: the
query tokens are split over the batch, then the cached prefix (total_kv - total_q) is spread on top.
The `tiny` set shrinks num_pages so the CPU interpreter stays fast.
"""

import torch

from ksearch.task import Workload
from ksearch.task.paged import paged_indices, prefix_sums, split_lengths, stable_generator

NUM_QO_HEADS, HEAD_DIM_CKV, HEAD_DIM_KPE = 16, 512, 64
SM_SCALE = 0.1352337747812271
POOL_PAGES = 989_669

# The dataset's 38 (total_q, batch, total_kv) triples.
FULL_TRIPLES = [
    (1, 1, 34), (2, 2, 53), (3, 1, 5), (4, 4, 121), (5, 1, 7), (6, 6, 109), (8, 1, 12), (10, 1, 12),
    (13, 1, 14), (15, 1, 18), (17, 1, 19),
    (22, 22, 17759), (26, 2, 32), (29, 1, 34), (33, 1, 34), (43, 1, 46), (52, 4, 67), (58, 1, 60),
    (69, 3, 90), (96, 1, 98),
    (123, 2, 185), (138, 4, 151), (199, 1, 203), (287, 1, 288), (376, 1, 381), (473, 5, 491),
    (805, 4, 814), (1028, 1, 1038),
    (1187, 3, 1205), (1954, 28, 2044), (3024, 3, 3029), (3842, 20, 3916), (6053, 11, 6091),
    (8987, 56, 14390),
    (10870, 2, 10875), (15092, 26, 15187), (15883, 18, 15937), (16384, 1, 16387),
]
# K-Search's eight feedback workloads (by total_q: 33, 1, 17, 52, 376, 287, 5, 1187).
FEEDBACK_TRIPLES = [(33, 1, 34), (1, 1, 34), (17, 1, 19), (52, 4, 67), (376, 1, 381), (287, 1, 288),
                    (5, 1, 7), (1187, 3, 1205)]


def _workload(name: str, total_q: int, batch: int, total_kv: int, num_pages: int = POOL_PAGES) -> Workload:
    if total_kv < total_q:
        raise ValueError(f"{name}: total_kv {total_kv} < total_q {total_q}")
    gen = stable_generator(name)
    q_lens = split_lengths(total_q, batch, gen)
    prefixes = split_lengths(total_kv - total_q, batch, gen, min_len=0)
    kv_lens = [q + p for q, p in zip(q_lens, prefixes)]
    return Workload(
        name=name,
        axes={"total_q": total_q, "num_pages": num_pages, "len_indptr": batch + 1, "num_kv_indices": total_kv},
        params={"q_lens": q_lens, "kv_lens": kv_lens, "sm_scale": SM_SCALE},
    )


def _name(prefix: str, tq: int, b: int, kv: int) -> str:
    return f"{prefix}_q{tq}_b{b}_kv{kv}"


def workload_sets() -> dict[str, list[Workload]]:
    tiny = [
        _workload("tiny_q5_b1_kv7", 5, 1, 7, 32),
        _workload("tiny_q19_b3_kv40", 19, 3, 40, 96),
        _workload("tiny_q24_b1_kv90", 24, 1, 90, 160),
        _workload("tiny_q4_b4_kv90", 4, 4, 90, 160),
    ]
    feedback = [_workload(_name("fb", *t), *t) for t in FEEDBACK_TRIPLES]
    full = [_workload(_name("full", *t), *t) for t in FULL_TRIPLES]
    return {"tiny": tiny, "feedback": feedback, "full": full}


def make_inputs(workload: Workload, *, device: str, seed: int) -> dict:
    ax = workload.axes
    gen = torch.Generator(device=device).manual_seed(seed)
    total_q, pages = ax["total_q"], ax["num_pages"]
    bf16 = torch.bfloat16
    # Drawn directly in bf16: the pool is ~1 GB of bf16 and an fp32 staging copy would double it.
    q_nope = torch.randn(total_q, NUM_QO_HEADS, HEAD_DIM_CKV, generator=gen, device=device, dtype=bf16)
    q_pe = torch.randn(total_q, NUM_QO_HEADS, HEAD_DIM_KPE, generator=gen, device=device, dtype=bf16)
    ckv_cache = torch.randn(pages, 1, HEAD_DIM_CKV, generator=gen, device=device, dtype=bf16)
    kpe_cache = torch.randn(pages, 1, HEAD_DIM_KPE, generator=gen, device=device, dtype=bf16)
    q_lens = workload.params["q_lens"]
    qo_indptr = prefix_sums(q_lens)
    kv_indptr, kv_indices = paged_indices(workload.params["kv_lens"], pages, torch.Generator().manual_seed(seed))
    return {
        "q_nope": q_nope, "q_pe": q_pe, "ckv_cache": ckv_cache, "kpe_cache": kpe_cache,
        "qo_indptr": qo_indptr.to(device), "kv_indptr": kv_indptr.to(device), "kv_indices": kv_indices.to(device),
        "sm_scale": float(workload.params["sm_scale"]),
    }
