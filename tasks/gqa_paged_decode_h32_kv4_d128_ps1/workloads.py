"""Workloads for GQA paged decode: synthesised paged indices matching the dataset's axes.

Sets:
- `tiny` (CPU, what a CPU search selects on): a short sequence, one sequence longer than any tile of the
  catalog (BLOCK_N <= 128; 320 tokens is more than 2 such tiles, so a kernel that stops after its first
  tile or its first 128 tokens fails), and a ragged batch of five with one long sequence (300 tokens: at
  split_kv's default split count of 3 each split still spans two 64-token tiles), short ones and an empty
  one (kv_len 0: output 0 and lse -inf, which the reference and the checker accept); five sequences, so a
  kernel that handles only the first three of a batch fails. Sizes are kept small because the
  Triton interpreter pays per program: split_kv's combine step alone runs batch x 32 programs.
- `feedback` (GPU, what a GPU search selects on): K-Search's five shapes.
- `full`: the dataset's 48 axes, plus issue 23's four shapes where per-sequence splits lost (a 40-sequence
  batch of 30..180k tokens each, five sequences with one holding 94% of the tokens, 3 x 6000, 2 x 24000).
- `space` (GPU, held out), and `validate`, the gate a new best must not regress on: a subset of `space`
  (VALIDATE_GATE, same axes, about one feedback evaluation's cost). `space`: the shape space a serving engine sees.
  Axes and why:
  * batch 1, 4, 16, 64, 256: single-request latency (1), small and mid serving batches (4, 16, 64), and a
    large continuous-batching step (256). Small batches starve a one-program-per-sequence kernel of
    parallelism (4 kv heads x batch programs on 132 SMs), large ones do not need splits.
  * KV length per sequence 64 .. 64k: short chats (64, 512), long prompts (4k, 16k) and long-context
    requests (32k, 64k), where a kernel must split a single sequence across SMs.
  * uniform batches (every sequence the same length) and ragged ones: log-uniform lengths in a batch, and
    one very long sequence among short ones (a long-context request batched with chat traffic), which
    punishes even splits per sequence and rewards balanced chunking; issue 23's mixes (40 sequences of
    30..50k tokens, [50000, 10, 200, 3000, 77], 3 x 6000, 2 x 24000). The gate holds five ragged and five
    uniform shapes.
  Total KV tokens stay <= ~2M (K+V = 2 KiB per token: <= 4 GiB of cache; the reference pads to the longest
  sequence, so ragged batches keep batch x max_len <= ~2M too).
- `validate_cpu`: the CPU stand-in for `validate` (the set `eval.validate=auto` picks on a CPU), disjoint
  from `tiny`: one ragged batch of five that is also the long case (a 301-token sequence, short ones and
  an empty one). One workload only: every new best is measured on it, and the default CPU run must stay short.

Regions (for shape-dispatched solutions): batch bucket x mean KV length per sequence bucket, both from
tensor shapes (batch = q.shape[0], mean length = kv_indices.shape[0] / batch), see `REGIONS`.
"""

import math

import torch

from ksearch.task import Workload
from ksearch.task.paged import (
    decode_workload,
    decode_workload_lens,
    log_spread_lengths,
    paged_indices,
    stable_generator,
)
from ksearch.task.regions import Feature, RegionScheme

NUM_QO_HEADS, NUM_KV_HEADS, HEAD_DIM = 32, 4, 128
SM_SCALE = 1.0 / math.sqrt(HEAD_DIM)


def _workload(name: str, batch: int, total: int, num_pages: int | None = None) -> Workload:
    return decode_workload(name, batch, total, num_pages or total + max(16, total // 4), SM_SCALE)


def _lens(name: str, lens: list[int], num_pages: int | None = None) -> Workload:
    total = sum(lens)
    return decode_workload_lens(name, lens, num_pages or total + max(16, total // 4), SM_SCALE)


#: Region = batch bucket x mean KV tokens per sequence bucket (host-side, from shapes only).
REGIONS = RegionScheme((
    Feature("b", "batch_size", (1, 8, 32, 128)),
    Feature("L", "num_kv_indices", (256, 2048, 8192, 32768), den="batch_size"),
))


def region_of(workload: Workload) -> str:
    return REGIONS.of(workload)


def _validate() -> list[Workload]:
    out = []
    uniform = [(1, 64), (1, 512), (1, 4096), (1, 16384), (1, 32768), (1, 65536),
               (4, 2048), (4, 16384), (4, 65536),
               (16, 512), (16, 4096), (16, 32768),
               (64, 64), (64, 1024), (64, 8192), (64, 16384),
               (256, 64), (256, 512), (256, 2048), (256, 8192)]
    for b, length in uniform:
        out.append(_lens(f"val_b{b}_l{length}", [length] * b))
    # Ragged: log-uniform lengths within a batch (mostly short, a few long).
    for b, lo, hi in [(7, 64, 16384), (32, 64, 8192), (128, 64, 4096), (256, 16, 4096)]:
        name = f"val_ragged_b{b}_l{lo}-{hi}"
        out.append(_lens(name, log_spread_lengths(b, lo, hi, stable_generator(name))))
    # One very long sequence among short ones.
    out.append(_lens("val_onelong_b8_l65536", [65536] + [128] * 7))
    out.append(_lens("val_onelong_b32_l32768", [32768] + [96 + 13 * i for i in range(31)]))
    out.append(_lens("val_onelong_b128_l16384", [16384] + [200] * 127))
    out.extend(_issue23_mixes("val"))
    return out


def _issue23_mixes(prefix: str) -> list[Workload]:
    """Issue 23's shapes where per-sequence splits lost: a 40-sequence log-spread batch (`val`: lengths
    30..50000, so the reference's padded batch stays within 2M tokens; `full`: 30..180000, 829k tokens),
    five sequences of which one holds 94% of the tokens, and 3 x 6000 and 2 x 24000 (too few sequences to
    fill 132 SMs without splitting them)."""
    hi = 50000 if prefix == "val" else 180000
    name = f"{prefix}_ragged_b40_l30-{hi}" if prefix == "val" else "full_ragged40_l30-180000"
    return [_lens(name, log_spread_lengths(40, 30, hi, stable_generator(name))),
            _lens(f"{prefix}_mix5_l50000", [50000, 10, 200, 3000, 77]),
            _lens(f"{prefix}_b3_l6000", [6000] * 3),
            _lens(f"{prefix}_b2_l24000", [24000] * 2)]


def workload_sets() -> dict[str, list[Workload]]:
    tiny = [
        _workload("tiny_b1_l7", 1, 7, 16),
        _lens("tiny_b1_l320", [320]),
        _lens("tiny_ragged_b5_l300", [300, 0, 17, 41, 6]),
    ]
    validate_cpu = [
        _lens("vcpu_ragged_b5_l301", [5, 301, 0, 12, 3]),
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
            + [_workload(f"full_b64_t{t}", 64, t) for t in b64]
            + _issue23_mixes("full"))
    space = _validate()
    return {"tiny": tiny, "feedback": feedback, "full": full, "validate": validate_gate(space), "space": space,
            "validate_cpu": validate_cpu}


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


#: The held-out gate (`validate`): 10 of the `space` shapes, spanning the same axes, so that confirming
#: a new best costs about as much as one feedback evaluation (at most 2x, issue 20). `space` keeps every
#: shape, for `ksearch bench ... eval.workloads=space`.
#: Ragged batches weigh as much as uniform ones (issue 23): five of each.
VALIDATE_GATE = ("val_b1_l64", "val_b1_l65536", "val_b3_l6000", "val_b16_l4096", "val_b256_l2048",
                 "val_ragged_b40_l30-50000", "val_mix5_l50000", "val_ragged_b7_l64-16384", "val_ragged_b128_l64-4096",
                 "val_onelong_b32_l32768")


def validate_gate(space: list[Workload]) -> list[Workload]:
    picked = [w for w in space if w.name in VALIDATE_GATE]
    assert len(picked) == len(VALIDATE_GATE), "a VALIDATE_GATE name is not in the space set"
    return picked
