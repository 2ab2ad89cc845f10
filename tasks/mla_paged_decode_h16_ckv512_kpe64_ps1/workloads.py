"""Workloads for MLA paged decode: synthesised paged indices matching the dataset's axes.

Every dataset workload uses SGLang's whole token pool as the cache (num_pages = 989,669 rows) and
sm_scale = 0.1352337747812271. The `tiny` set shrinks num_pages so the CPU interpreter stays fast.

Sets:
- `tiny` (CPU, what a CPU search selects on): a short sequence; one 400-token sequence, longer than any
  tile of the catalog (BLOCK_N <= 64) times any plausible per-program chunk on a one-SM schedule; and a
  ragged batch of five with one long sequence (330), short ones and an empty one (kv_len 0: output 0, lse
  -inf, accepted by the reference and the checker).
- `feedback` (GPU): K-Search's five shapes. `full`: the dataset's 47 axes, plus issue 23's four shapes where
  per-sequence splits lost (a 40-sequence batch of 30..180k tokens each, five sequences with one holding 94%
  of the tokens, 3 x 6000, 2 x 24000).
- `space` (GPU, held out), and `validate`, the gate a new best must not regress on: a subset of `space`
  (VALIDATE_GATE, same axes, about one feedback evaluation's cost). `space`. Axes and why:
  * batch 1, 4, 16, 32, 64, 128, 256: single-request latency, small to large continuous-batching steps
    (DeepSeek-V3 serving at tp=8 runs decode batches up to a few hundred);
  * KV length per sequence 64 .. 64k: short chats to DeepSeek's long context; batch 1 at 32k-64k is where
    a kernel must split one sequence over the whole GPU;
  * uniform and ragged batches (log-uniform lengths; one very long sequence among short ones; issue 23's
    mixes: 40 sequences of 30..50k tokens, [50000, 10, 200, 3000, 77], 3 x 6000, 2 x 24000). The gate holds
    five ragged and five uniform shapes.
  Every workload uses the same 989,669-row pool as the dataset (about 1.1 GB of bf16 per input set), so
  total KV tokens stay below the pool size (at most ~790k here).
- `validate_cpu`: the CPU stand-in for `validate` (`eval.validate=auto` on a CPU), disjoint from `tiny`:
  one long sequence and a ragged batch of five with a long, an empty and short sequences.

Regions: batch bucket x mean KV length per sequence bucket, from shapes (batch = q_nope.shape[0], mean
length = kv_indices.shape[0] / batch); see `REGIONS`.
"""

import torch

from ksearch.task import Workload
from ksearch.task.paged import (
    decode_workload,
    decode_workload_lens,
    log_spread_lengths,
    page_pool,
    paged_indices,
    stable_generator,
)
from ksearch.task.regions import Feature, RegionScheme

NUM_QO_HEADS, HEAD_DIM_CKV, HEAD_DIM_KPE = 16, 512, 64
SM_SCALE = 0.1352337747812271
POOL_PAGES = 989_669


def _workload(name: str, batch: int, total: int, num_pages: int = POOL_PAGES) -> Workload:
    return decode_workload(name, batch, total, num_pages, SM_SCALE)


def _lens(name: str, lens: list[int], num_pages: int = POOL_PAGES) -> Workload:
    return decode_workload_lens(name, lens, num_pages, SM_SCALE)


#: Region = batch bucket x mean KV tokens per sequence bucket (host-side, from shapes only).
REGIONS = RegionScheme((
    Feature("b", "batch_size", (1, 8, 32, 128)),
    Feature("L", "num_kv_indices", (512, 2048, 8192, 32768), den="batch_size"),
))


def region_of(workload: Workload) -> str:
    return REGIONS.of(workload)


def _validate() -> list[Workload]:
    uniform = [(1, 64), (1, 1024), (1, 8192), (1, 32768), (1, 65536),
               (4, 4096), (4, 32768),
               (16, 512), (16, 8192), (16, 32768),
               (32, 16384),
               (64, 256), (64, 2048), (64, 8192),
               (128, 1024), (128, 4096),
               (256, 64), (256, 512), (256, 3072)]
    out = [_lens(f"val_b{b}_l{length}", [length] * b) for b, length in uniform]
    for b, lo, hi in [(7, 64, 16384), (48, 64, 8192), (256, 32, 4096)]:
        name = f"val_ragged_b{b}_l{lo}-{hi}"
        out.append(_lens(name, log_spread_lengths(b, lo, hi, stable_generator(name))))
    out.append(_lens("val_onelong_b16_l65536", [65536] + [256] * 15))
    out.append(_lens("val_onelong_b64_l32768", [32768] + [100 + 7 * i for i in range(63)]))
    out.extend(_issue23_mixes("val"))
    return out


def _issue23_mixes(prefix: str) -> list[Workload]:
    """Issue 23's shapes where per-sequence splits lost: a 40-sequence log-spread batch (`val`: lengths
    30..50000, so the reference's padded batch stays within 2M tokens; `full`: 30..180000, 829k tokens, within
    the pool), five sequences of which one holds 94% of the tokens, and 3 x 6000 and 2 x 24000 (too few
    sequences to fill 132 SMs without splitting them)."""
    hi = 50000 if prefix == "val" else 180000
    name = f"{prefix}_ragged_b40_l30-{hi}" if prefix == "val" else "full_ragged40_l30-180000"
    return [_lens(name, log_spread_lengths(40, 30, hi, stable_generator(name))),
            _lens(f"{prefix}_mix5_l50000", [50000, 10, 200, 3000, 77]),
            _lens(f"{prefix}_b3_l6000", [6000] * 3),
            _lens(f"{prefix}_b2_l24000", [24000] * 2)]


def workload_sets() -> dict[str, list[Workload]]:
    tiny = [
        _workload("tiny_b1_l9", 1, 9, 40),
        _lens("tiny_b1_l400", [400], 480),
        _lens("tiny_ragged_b5_l330", [5, 330, 0, 21, 2], 400),
    ]
    validate_cpu = [
        _lens("vcpu_b1_l301", [301], 360),
        _lens("vcpu_ragged_b5_l280", [280, 0, 3, 45, 7], 400),
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
            + [_workload(f"full_b64_t{t}", 64, t) for t in b64]
            + _issue23_mixes("full"))
    space = _validate()
    return {"tiny": tiny, "feedback": feedback, "full": full, "validate": validate_gate(space), "space": space,
            "validate_cpu": validate_cpu}


def make_inputs(workload: Workload, *, device: str, seed: int) -> dict:
    ax = workload.axes
    gen = torch.Generator(device=device).manual_seed(seed)
    batch, pages = ax["batch_size"], ax["num_pages"]
    bf16 = torch.bfloat16
    # Drawn directly in bf16 (an fp32 staging copy would double the memory).
    q_nope = torch.randn(batch, NUM_QO_HEADS, HEAD_DIM_CKV, generator=gen, device=device, dtype=bf16)
    q_pe = torch.randn(batch, NUM_QO_HEADS, HEAD_DIM_KPE, generator=gen, device=device, dtype=bf16)
    indptr, indices = paged_indices(workload.params["kv_lens"], pages, torch.Generator().manual_seed(seed))
    # Fresh values only in the pages the indices name (the rest of the ~1 GB pool is zeros: ksearch.task.paged).
    ckv_cache = page_pool(pages, (1, HEAD_DIM_CKV), indices, gen, device=device, dtype=bf16)
    kpe_cache = page_pool(pages, (1, HEAD_DIM_KPE), indices, gen, device=device, dtype=bf16)
    return {
        "q_nope": q_nope, "q_pe": q_pe, "ckv_cache": ckv_cache, "kpe_cache": kpe_cache,
        "kv_indptr": indptr.to(device), "kv_indices": indices.to(device),
        "sm_scale": float(workload.params["sm_scale"]),
    }


#: The held-out gate (`validate`): 10 of the `space` shapes, spanning the same axes, so that confirming
#: a new best costs about as much as one feedback evaluation (at most 2x, issue 20). `space` keeps every
#: shape, for `ksearch bench ... eval.workloads=space`.
#: Ragged batches weigh as much as uniform ones (issue 23): five of each.
VALIDATE_GATE = ("val_b1_l64", "val_b1_l65536", "val_b2_l24000", "val_b16_l8192", "val_b256_l512",
                 "val_ragged_b40_l30-50000", "val_mix5_l50000", "val_ragged_b7_l64-16384", "val_ragged_b256_l32-4096",
                 "val_onelong_b16_l65536")


def validate_gate(space: list[Workload]) -> list[Workload]:
    picked = [w for w in space if w.name in VALIDATE_GATE]
    assert len(picked) == len(VALIDATE_GATE), "a VALIDATE_GATE name is not in the space set"
    return picked
