"""Paged KV inputs: page ids distinct and scattered, cheap to draw; pools fresh only where the indices point."""

import pytest
import torch

from ksearch.task import load_task
from ksearch.task.paged import distinct_pages, page_pool, paged_indices


@pytest.mark.parametrize("total,num_pages", [(0, 10), (1, 1), (2, 2), (7, 7), (100, 101), (4096, 989_669),
                                             (989_669, 989_669)])
def test_page_ids_are_distinct_and_in_the_pool(total, num_pages):
    ids = distinct_pages(total, num_pages, torch.Generator().manual_seed(3))
    assert ids.numel() == total
    assert ids.unique().numel() == total
    if total:
        assert 0 <= int(ids.min()) and int(ids.max()) < num_pages


def test_page_ids_are_scattered_reproducible_and_differ_by_seed():
    a = distinct_pages(1000, 989_669, torch.Generator().manual_seed(1))
    b = distinct_pages(1000, 989_669, torch.Generator().manual_seed(1))
    c = distinct_pages(1000, 989_669, torch.Generator().manual_seed(2))
    assert torch.equal(a, b) and not torch.equal(a, c)
    steps = (a[1:] - a[:-1]).abs()
    assert int(steps.min()) > 1000          # neighbouring tokens never share a page neighbourhood


def test_too_many_tokens_for_the_pool_is_refused():
    with pytest.raises(ValueError, match="do not fit"):
        paged_indices([5, 6], 10, torch.Generator().manual_seed(0))


def test_drawing_page_ids_does_not_walk_the_pool(monkeypatch):
    """O(tokens), not O(pool): no permutation of the ~1M-page pool (a randperm of it took ~10 ms per input set),
    and no tensor larger than the ids drawn."""
    sizes = []
    arange = torch.arange

    def counted_arange(*args, **kwargs):
        out = arange(*args, **kwargs)
        sizes.append(out.numel())
        return out

    def no_randperm(*args, **kwargs):
        raise AssertionError("a permutation of the whole pool")

    monkeypatch.setattr(torch, "randperm", no_randperm)
    monkeypatch.setattr(torch, "arange", counted_arange)
    ids = distinct_pages(4096, 989_669, torch.Generator().manual_seed(0))
    assert ids.numel() == 4096 and max(sizes) == 4096


def test_a_pool_is_fresh_where_the_indices_point_and_zero_elsewhere():
    pages = torch.tensor([3, 17, 40])
    pool = page_pool(64, (1, 8), pages, torch.Generator().manual_seed(0), device="cpu", dtype=torch.bfloat16)
    assert pool.shape == (64, 1, 8) and pool.dtype == torch.bfloat16
    used = torch.zeros(64, dtype=torch.bool)
    used[pages] = True
    assert torch.count_nonzero(pool[~used]) == 0
    assert bool((pool[used].float().std(dim=-1) > 0.1).all())


@pytest.mark.parametrize("name", ["mla_paged_prefill_causal_h16_ckv512_kpe64_ps1",
                                  "mla_paged_decode_h16_ckv512_kpe64_ps1"])
def test_mla_inputs_fill_every_referenced_page(name):
    task = load_task(name)
    w = task.workload_sets()["tiny"][-1]
    x = task.make_inputs(w, device="cpu", seed=5)
    pages = x["kv_indices"].long()
    assert pages.unique().numel() == pages.numel()
    assert bool((x["ckv_cache"][pages].float().abs().sum(dim=(1, 2)) > 0).all())
    assert bool((x["kpe_cache"][pages].float().abs().sum(dim=(1, 2)) > 0).all())
    y = task.make_inputs(w, device="cpu", seed=5)
    assert all(torch.equal(x[k], y[k]) for k in x if isinstance(x[k], torch.Tensor))
