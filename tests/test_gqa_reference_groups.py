"""GQA decode's reference in groups of sequences (its padded work bounded by GROUP_TOKENS): the same answer as a
plain per-sequence softmax in float64, whether the batch runs as one group or is cut into many, empty sequences
included (output 0, lse -inf)."""

import math

import pytest
import torch

from ksearch.task import load_task
from ksearch.task.paged import paged_indices

TASK = "gqa_paged_decode_h32_kv4_d128_ps1"


def _namespace(run):
    """The reference module's globals (run is wrapped by torch.no_grad)."""
    return getattr(run, "__wrapped__", run).__globals__


def _per_sequence(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    out = torch.zeros(q.shape, dtype=torch.float64)
    lse = torch.full(q.shape[:2], -math.inf, dtype=torch.float64)
    for b in range(q.shape[0]):
        rows = kv_indices[kv_indptr[b]:kv_indptr[b + 1]].long()
        if rows.numel() == 0:
            continue
        k = k_cache[rows, 0].double().repeat_interleave(8, dim=1)      # [L, 32, D]: head h reads kv head h // 8
        v = v_cache[rows, 0].double().repeat_interleave(8, dim=1)
        logits = torch.einsum("hd,lhd->hl", q[b].double(), k) * sm_scale
        lse[b] = torch.logsumexp(logits, dim=-1) / math.log(2.0)
        out[b] = torch.einsum("hl,lhd->hd", torch.softmax(logits, dim=-1), v)
    return out, lse


@pytest.mark.parametrize("group_tokens", [1 << 19, 64, 1])
def test_groups_of_sequences_give_the_per_sequence_answer(group_tokens, monkeypatch):
    task = load_task(TASK)
    run = task.reference
    monkeypatch.setitem(_namespace(run), "GROUP_TOKENS", group_tokens)
    lens = [37, 0, 5, 120, 1, 0, 64, 9]
    pages = sum(lens) + 16
    gen = torch.Generator().manual_seed(3)
    kv_indptr, kv_indices = paged_indices(lens, pages, torch.Generator().manual_seed(3))
    q = torch.randn(len(lens), 32, 128, generator=gen).to(torch.bfloat16)
    k_cache = torch.randn(pages, 1, 4, 128, generator=gen).to(torch.bfloat16)
    v_cache = torch.randn(pages, 1, 4, 128, generator=gen).to(torch.bfloat16)
    out, lse = run(q, k_cache, v_cache, kv_indptr, kv_indices, 128 ** -0.5)
    want_out, want_lse = _per_sequence(q, k_cache, v_cache, kv_indptr, kv_indices, 128 ** -0.5)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    torch.testing.assert_close(out.double(), want_out, atol=1e-2, rtol=1e-2)
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    torch.testing.assert_close(lse.double()[finite], want_lse[finite], atol=1e-4, rtol=1e-4)
    assert (out[torch.tensor(lens) == 0] == 0).all()
    assert _namespace(run)["GROUP_TOKENS"] == group_tokens


def test_no_group_pads_more_tokens_than_its_bound(monkeypatch):
    """The `full` set's ragged batch (40 sequences of 30..180k tokens) in groups of at most GROUP_TOKENS padded
    tokens, except a single sequence longer than the bound, which is a group of its own."""
    task = load_task(TASK)
    run = task.reference
    g = _namespace(run)
    seen = []
    monkeypatch.setitem(g, "_group", lambda q, *a: seen.append((q.shape[0], a[-1])) or (
        torch.zeros(q.shape, dtype=torch.bfloat16), torch.zeros(q.shape[:2])))
    ragged = next(w for w in task.workload_set("full") if w.name == "full_ragged40_l30-180000")
    lens = ragged.params["kv_lens"]
    kv_indptr = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()])
    run(torch.zeros(len(lens), 32, 128), torch.zeros(1, 1, 4, 128), torch.zeros(1, 1, 4, 128), kv_indptr,
        torch.zeros(sum(lens), dtype=torch.int32), 1.0)
    assert sum(n for n, _ in seen) == len(lens)
    assert all(n * longest <= g["GROUP_TOKENS"] or n == 1 for n, longest in seen)
