import math

import torch

#: Padded tokens one batched step of the reference takes at most: sequences are padded to the longest of their
#: group, so a group of 40 sequences padded to 180k tokens (the `full` set's ragged batch) held ~30 GB of fp32
#: keys and values at once and starved a candidate's process of memory on an 80 GB card. Groups of sequences in
#: batch order whose padded size stays under this bound keep the reference near 1 GB of work at a time.
GROUP_TOKENS = 1 << 19


@torch.no_grad()
def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    batch_size, num_qo_heads, head_dim = q.shape
    _, page_size, num_kv_heads, _ = k_cache.shape
    assert num_qo_heads == 32 and num_kv_heads == 4 and head_dim == 128 and page_size == 1
    assert kv_indptr.shape[0] == batch_size + 1
    assert kv_indices.shape[0] == int(kv_indptr[-1].item())

    lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int64).tolist()
    output = torch.empty((batch_size, num_qo_heads, head_dim), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty((batch_size, num_qo_heads), dtype=torch.float32, device=q.device)
    lo = 0
    while lo < batch_size:
        hi, longest = lo + 1, max(lens[lo], 1)
        while hi < batch_size and (hi + 1 - lo) * max(longest, lens[hi], 1) <= GROUP_TOKENS:
            longest = max(longest, lens[hi])
            hi += 1
        output[lo:hi], lse[lo:hi] = _group(q[lo:hi], k_cache, v_cache, kv_indptr[lo:hi + 1], kv_indices,
                                           sm_scale, max(longest, 1))
        lo = hi
    return output, lse


def _group(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, max_len):
    """Sequences kv_indptr[:-1] of the batch, padded to max_len and masked: one batched computation."""
    batch_size, num_qo_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    group = num_qo_heads // num_kv_heads
    device = q.device
    starts = kv_indptr[:-1].to(torch.int64)
    lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int64)
    pos = torch.arange(max_len, device=device)
    valid = pos[None, :] < lens[:, None]                                   # [B, L]
    flat = (starts[:, None] + pos[None, :]).clamp(max=max(kv_indices.shape[0] - 1, 0))
    rows = kv_indices.to(torch.int64)[flat] if kv_indices.numel() else torch.zeros_like(flat)

    # Gather the referenced rows first (bf16), then upcast only those: the cache is the whole token pool.
    keys = k_cache[:, 0][rows].to(torch.float32)                           # [B, L, KVH, D]
    values = v_cache[:, 0][rows].to(torch.float32)                         # [B, L, KVH, D]
    queries = q.to(torch.float32).view(batch_size, num_kv_heads, group, head_dim)

    logits = torch.einsum("bkgd,blkd->bkgl", queries, keys) * sm_scale     # [B, KVH, G, L]
    logits = logits.masked_fill(~valid[:, None, None, :], float("-inf"))
    row_max = logits.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    weights = torch.exp(logits - row_max)
    denom = weights.sum(dim=-1, keepdim=True)
    probs = weights / denom.clamp(min=1e-30)
    out = torch.einsum("bkgl,blkd->bkgd", probs, values)
    lse_e = (torch.log(denom) + row_max).squeeze(-1)                       # natural-log lse, -inf if empty

    output = out.reshape(batch_size, num_qo_heads, head_dim).to(torch.bfloat16)
    lse = (lse_e / math.log(2.0)).reshape(batch_size, num_qo_heads).to(torch.float32)
    return output, lse
