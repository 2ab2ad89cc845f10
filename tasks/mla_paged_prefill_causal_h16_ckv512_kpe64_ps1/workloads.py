"""Workloads for causal MLA paged prefill: synthesised q/kv splits matching the dataset's axes.

Every dataset workload is a (total_q, batch, total_kv) triple with num_pages = 989,669 (SGLang's whole
token pool) and sm_scale = 0.1352337747812271. Each sequence gets q_len >= 1 and kv_len >= q_len: the
query tokens are split over the batch, then the cached prefix (total_kv - total_q) is spread on top.
The `tiny` set shrinks num_pages so the CPU interpreter stays fast.

The definition allows kv_len > q_len (chunked or prefix-cached prefill): query i of a sequence sits at
KV position kv_len - q_len + i and sees positions <= that (bottom-right causal mask, FlashInfer's
convention), which the reference implements. It also allows a sequence with no queries (q_len 0).

Sets:
- `tiny` (CPU, what a CPU search selects on): a short prefill, a batch of three, a 24-token prefill over a
  330-token KV (longer than any KV tile of the catalog, BLOCK_N <= 64, and six BLOCK_Q tiles of queries),
  and a ragged batch of five with one long-prefix decode-like query, short prefills, a chunk over a
  short prefix and an empty sequence (q_len 0 and kv_len 0: it owns no output rows).
- `search` (GPU, what `ksearch run` selects on by default; task.yaml): K-Search's feedback set has no
  prompt over 1.2k tokens, so a search on it ships kernels 6x slower than FlashInfer on real prompts
  (issue 22). This set weighs where the FLOPs are: single prompts of 3k, 8k and 16k tokens, a chunk of
  1536 new tokens over a 16k KV, a ragged batch of four prompts (4k down to 96 tokens), plus four
  small shapes so the dispatcher keeps a kernel for them (a 48-token prefill, a 400-token one, 32 chat
  turns of 48 tokens, and a decode-like batch of 8 x 2 queries over 6k tokens each). About 7.5 TFLOP
  (causal) per pass over the nine; none of them is in `full`, `space` or `validate`.
- `feedback` (GPU): K-Search's eight shapes. `full`: the dataset's 38 triples.
- `space` (GPU, held out), and `validate`, the gate a new best must not regress on: a subset of `space`
  (VALIDATE_GATE, same axes, about one feedback evaluation's cost). `space`. Axes and why:
  * total_q 1 .. 16k: a single decode-like query up to a 16k-token prompt (the dataset's largest);
  * single long sequences (one prompt prefilled at once: q_len = kv_len) and many short ones (a batch of
    chat turns: 64-256 sequences of 16-64 tokens), which need very different tilings;
  * KV longer than Q: chunked prefill (a 512-8k chunk over a 32k-64k cached prefix) and decode-like mixes
    (many 1-token queries over long KV), as SGLang/vLLM schedule them.
  Every workload uses the dataset's 989,669-row pool; total KV tokens stay below it.
- `validate_cpu`: the CPU stand-in for `validate` (`eval.validate=auto` on a CPU), disjoint from `tiny`: a
  chunked prefill over a long prefix and a ragged batch of five with an empty sequence.

Regions: total_q bucket x (KV tokens per query token) bucket, from shapes (total_q = q_nope.shape[0], total
KV = kv_indices.shape[0]): fresh prefills have a ratio near 1, chunked prefills and decode-like mixes a
large one. See `REGIONS`.
"""

import torch

from ksearch.task import Workload
from ksearch.task.paged import page_pool, paged_indices, prefix_sums, split_lengths, stable_generator
from ksearch.task.regions import Feature, RegionScheme

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


def _workload_lens(name: str, q_lens: list[int], kv_lens: list[int], num_pages: int = POOL_PAGES) -> Workload:
    """A prefill workload with these exact per-sequence query and KV lengths (kv_len >= q_len >= 0)."""
    if len(q_lens) != len(kv_lens) or not q_lens or any(not 0 <= q <= kv for q, kv in zip(q_lens, kv_lens)):
        raise ValueError(f"{name}: need one (q_len, kv_len) per sequence with 0 <= q_len <= kv_len")
    if sum(kv_lens) > num_pages:
        raise ValueError(f"{name}: {sum(kv_lens)} KV tokens do not fit in {num_pages} pages")
    return Workload(
        name=name,
        axes={"total_q": sum(q_lens), "num_pages": num_pages, "len_indptr": len(q_lens) + 1,
              "num_kv_indices": sum(kv_lens)},
        params={"q_lens": [int(q) for q in q_lens], "kv_lens": [int(k) for k in kv_lens], "sm_scale": SM_SCALE},
    )


#: Region = total_q bucket x KV tokens per query token bucket (host-side, from shapes only).
REGIONS = RegionScheme((
    Feature("q", "total_q", (16, 256, 2048)),
    Feature("kvq", "num_kv_indices", (1.5, 8), den="total_q"),
))


def region_of(workload: Workload) -> str:
    return REGIONS.of(workload)


def _validate() -> list[Workload]:
    out = [
        # single sequences, fresh prefill (q_len == kv_len)
        _workload_lens("val_single_q128", [128], [128]),
        _workload_lens("val_single_q1024", [1024], [1024]),
        _workload_lens("val_single_q4096", [4096], [4096]),
        _workload_lens("val_single_q16384", [16384], [16384]),
        # many short sequences
        _workload_lens("val_many_b64_q16", [16] * 64, [16] * 64),
        _workload_lens("val_many_b128_q32", [32] * 128, [32 + 7 * (i % 9) for i in range(128)]),
        _workload_lens("val_many_b256_q64", [64] * 256, [64] * 256),
        # chunked prefill: a chunk of new tokens over a long cached prefix (KV much longer than Q)
        _workload_lens("val_chunk_q512_kv65536", [512], [65536]),
        _workload_lens("val_chunk_q2048_kv34816", [2048], [34816]),
        _workload_lens("val_chunk_b2_q8192_kv40960", [4096, 4096], [8192, 32768]),
        _workload_lens("val_chunk_b4_q16384_kv131072", [4096] * 4, [32768] * 4),
        # decode-like: one query token per sequence (or very few) over long KV
        _workload_lens("val_decodelike_q1_kv4096", [1], [4096]),
        _workload_lens("val_decodelike_b64_kv1024", [1] * 64, [1024] * 64),
        _workload_lens("val_decodelike_b16_kv32768", [2] * 16, [32768] * 16),
    ]
    # a serving mix: a long prompt chunk, several short prefills and decode-like queries in one batch
    q = [2048] + [100 + 31 * i for i in range(7)] + [1] * 24
    kv = [20000] + [100 + 31 * i for i in range(7)] + [512 + 97 * i for i in range(24)]
    out.append(_workload_lens("val_mix_b32", q, kv))
    return out


def _search() -> list[Workload]:
    """The default GPU selection set (see the module docstring): long prompts first, a few small shapes."""
    return [
        _workload_lens("s_single_q3072", [3072], [3072]),
        _workload_lens("s_single_q8192", [8192], [8192]),
        _workload_lens("s_single_q16384_kv16896", [16384], [16896]),
        _workload_lens("s_chunk_q1536_kv16384", [1536], [16384]),
        _workload_lens("s_ragged_b4_q6240", [4096, 1536, 512, 96], [4096, 2048, 512, 300]),
        _workload_lens("s_single_q48", [48], [48]),
        _workload_lens("s_single_q400_kv420", [400], [420]),
        _workload_lens("s_many_b32_q48", [48] * 32, [48 + 5 * (i % 7) for i in range(32)]),
        _workload_lens("s_decodelike_b8_q2_kv6144", [2] * 8, [6144] * 8),
    ]


def _name(prefix: str, tq: int, b: int, kv: int) -> str:
    return f"{prefix}_q{tq}_b{b}_kv{kv}"


def workload_sets() -> dict[str, list[Workload]]:
    tiny = [
        _workload("tiny_q5_b1_kv7", 5, 1, 7, 32),
        _workload("tiny_q19_b3_kv40", 19, 3, 40, 96),
        _workload_lens("tiny_q24_b1_kv330", [24], [330], 400),
        _workload_lens("tiny_ragged_b5_kv324", [3, 0, 1, 12, 2], [3, 0, 300, 12, 9], 400),
    ]
    validate_cpu = [
        _workload_lens("vcpu_chunk_q9_kv310", [9], [310], 360),
        _workload_lens("vcpu_ragged_b5_kv301", [0, 4, 2, 1, 3], [0, 270, 20, 6, 5], 360),
    ]
    feedback = [_workload(_name("fb", *t), *t) for t in FEEDBACK_TRIPLES]
    full = [_workload(_name("full", *t), *t) for t in FULL_TRIPLES]
    space = _validate()
    return {"tiny": tiny, "feedback": feedback, "search": _search(), "full": full, "validate": validate_gate(space),
            "space": space, "validate_cpu": validate_cpu}


def make_inputs(workload: Workload, *, device: str, seed: int) -> dict:
    ax = workload.axes
    gen = torch.Generator(device=device).manual_seed(seed)
    total_q, pages = ax["total_q"], ax["num_pages"]
    bf16 = torch.bfloat16
    # Drawn directly in bf16 (an fp32 staging copy would double the memory).
    q_nope = torch.randn(total_q, NUM_QO_HEADS, HEAD_DIM_CKV, generator=gen, device=device, dtype=bf16)
    q_pe = torch.randn(total_q, NUM_QO_HEADS, HEAD_DIM_KPE, generator=gen, device=device, dtype=bf16)
    q_lens = workload.params["q_lens"]
    qo_indptr = prefix_sums(q_lens)
    kv_indptr, kv_indices = paged_indices(workload.params["kv_lens"], pages, torch.Generator().manual_seed(seed))
    # Fresh values only in the pages the indices name (the rest of the ~1 GB pool is zeros: ksearch.task.paged).
    ckv_cache = page_pool(pages, (1, HEAD_DIM_CKV), kv_indices, gen, device=device, dtype=bf16)
    kpe_cache = page_pool(pages, (1, HEAD_DIM_KPE), kv_indices, gen, device=device, dtype=bf16)
    return {
        "q_nope": q_nope, "q_pe": q_pe, "ckv_cache": ckv_cache, "kpe_cache": kpe_cache,
        "qo_indptr": qo_indptr.to(device), "kv_indptr": kv_indptr.to(device), "kv_indices": kv_indices.to(device),
        "sm_scale": float(workload.params["sm_scale"]),
    }


#: The held-out gate (`validate`): 8 of the `space` shapes, spanning the same axes, so that confirming
#: a new best costs about as much as one feedback evaluation (at most 2x, issue 20). `space` keeps every
#: shape, for `ksearch bench ... eval.workloads=space`.
VALIDATE_GATE = ("val_decodelike_q1_kv4096", "val_single_q4096", "val_single_q16384", "val_many_b64_q16", "val_many_b128_q32", "val_chunk_q2048_kv34816", "val_decodelike_b16_kv32768", "val_mix_b32")


def validate_gate(space: list[Workload]) -> list[Workload]:
    picked = [w for w in space if w.name in VALIDATE_GATE]
    assert len(picked) == len(VALIDATE_GATE), "a VALIDATE_GATE name is not in the space set"
    return picked
