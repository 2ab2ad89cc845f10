"""Synthesis of valid paged-KV index tensors (page size 1): random, non-contiguous page ids."""

from __future__ import annotations

import hashlib
import math

import torch

from ksearch.task.workload import Workload


def stable_generator(key: str) -> torch.Generator:
    """A CPU generator seeded from a string, for workload layouts that must never change."""
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little")
    return torch.Generator().manual_seed(seed)


def split_lengths(total: int, batch: int, gen: torch.Generator, min_len: int = 1) -> list[int]:
    """Split `total` tokens over `batch` sequences, each at least `min_len`, unevenly but not wildly so."""
    if batch <= 0 or total < batch * min_len:
        raise ValueError(f"cannot split {total} tokens over {batch} sequences of at least {min_len}")
    weights = 0.5 + torch.rand(batch, generator=gen, dtype=torch.float64)
    spare = total - batch * min_len
    shares = torch.floor(weights / weights.sum() * spare).to(torch.int64)
    remainder = spare - int(shares.sum())
    order = torch.argsort(weights, descending=True)
    shares[order[:remainder]] += 1
    lens = (shares + min_len).tolist()
    assert sum(lens) == total
    return [int(x) for x in lens]


def prefix_sums(lens: list[int]) -> torch.Tensor:
    """An int32 indptr: [0, l0, l0+l1, ...]."""
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int32)
    indptr[1:] = torch.cumsum(torch.tensor(lens, dtype=torch.int64), 0).to(torch.int32)
    return indptr


def decode_workload(name: str, batch: int, total: int, num_pages: int, sm_scale: float) -> Workload:
    """A paged decode workload: `total` KV tokens split unevenly (but stably, by name) over `batch` sequences."""
    return decode_workload_lens(name, split_lengths(total, batch, stable_generator(name)), num_pages, sm_scale)


def decode_workload_lens(name: str, lens: list[int], num_pages: int, sm_scale: float) -> Workload:
    """A paged decode workload with these exact per-sequence KV lengths (0 = an empty sequence)."""
    if not lens or min(lens) < 0:
        raise ValueError(f"{name}: KV lengths must be a non-empty list of counts >= 0, got {lens}")
    batch, total = len(lens), sum(lens)
    if total > num_pages:
        raise ValueError(f"{name}: {total} tokens do not fit in {num_pages} pages")
    return Workload(
        name=name,
        axes={"batch_size": batch, "num_pages": num_pages, "len_indptr": batch + 1, "num_kv_indices": total},
        params={"kv_lens": [int(x) for x in lens], "sm_scale": sm_scale},
    )


def log_spread_lengths(batch: int, lo: int, hi: int, gen: torch.Generator) -> list[int]:
    """`batch` lengths drawn log-uniformly in [lo, hi] (a serving batch: mostly short, a few long), stable per
    generator. The first is pinned to `hi` and the second to `lo` so both ends are always present."""
    if batch < 2 or not 1 <= lo <= hi:
        raise ValueError(f"need batch >= 2 and 1 <= lo <= hi, got {batch}, {lo}, {hi}")
    u = torch.rand(batch, generator=gen, dtype=torch.float64)
    lens = torch.exp(torch.log(torch.tensor(float(lo))) + u * (torch.log(torch.tensor(float(hi))) -
                                                                torch.log(torch.tensor(float(lo)))))
    out = [int(round(float(x))) for x in lens]
    out[0], out[1] = hi, lo
    return out


def distinct_pages(total: int, num_pages: int, gen: torch.Generator) -> torch.Tensor:
    """`total` distinct page ids in [0, num_pages), scattered over the pool, as int64.

    An affine map i -> (a*i + b) mod num_pages with a coprime to num_pages (so no two ids collide), a drawn
    from the middle half of the range so that neighbouring tokens' pages lie far apart. It costs O(total): a
    randperm of a ~1M-page pool took ~10 ms of host time per input set, inside every timed window's input
    generation (MLA prefill, H100, session 18)."""
    if total > num_pages:
        raise ValueError(f"{total} tokens do not fit in {num_pages} pages")
    if num_pages <= 2:
        return torch.randperm(num_pages, generator=gen)[:total]
    lo, span = num_pages // 4, max(1, num_pages // 2)
    a = lo + int(torch.randint(span, (1,), generator=gen))
    while math.gcd(a, num_pages) != 1:
        a = a + 1 if a + 1 < num_pages else 1
    b = int(torch.randint(num_pages, (1,), generator=gen))
    return (torch.arange(total, dtype=torch.int64) * a + b) % num_pages


def paged_indices(kv_lens: list[int], num_pages: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """kv_indptr (prefix sums) and kv_indices (distinct, scattered page ids) as int32 CPU tensors."""
    total = sum(kv_lens)
    indptr = prefix_sums(kv_lens)
    return indptr, distinct_pages(total, num_pages, gen).to(torch.int32)


def page_pool(num_pages: int, row_shape: tuple[int, ...], pages: torch.Tensor, gen: torch.Generator, *,
              device: str, dtype: torch.dtype) -> torch.Tensor:
    """A KV pool of `num_pages` rows whose rows at `pages` hold fresh normal values, every other row zeros.

    A kernel reads only the pages its indices name, so only those need fresh values: drawing the whole
    ~1 GB pool of an MLA task cost tens of ms per input set, most of what the judge had to subtract from a
    timed window (H100, session 18)."""
    pool = torch.zeros((num_pages, *row_shape), dtype=dtype, device=device)
    if len(pages):
        pool[pages.to(device=device, dtype=torch.long)] = torch.randn((len(pages), *row_shape), generator=gen,
                                                                       device=device, dtype=dtype)
    return pool
