import math

import torch


@torch.no_grad()
def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale):
    batch_size, num_qo_heads, head_dim = q.shape
    _, page_size, num_kv_heads, _ = k_cache.shape
    group = num_qo_heads // num_kv_heads
    assert num_qo_heads == 32 and num_kv_heads == 4 and head_dim == 128 and page_size == 1
    assert kv_indptr.shape[0] == batch_size + 1
    assert kv_indices.shape[0] == int(kv_indptr[-1].item())
    device = q.device

    # Pad every sequence to the longest one and mask the tail: one batched computation, no Python loop.
    starts = kv_indptr[:-1].to(torch.int64)
    lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int64)
    max_len = max(int(lens.max().item()), 1)
    pos = torch.arange(max_len, device=device)
    valid = pos[None, :] < lens[:, None]                                   # [B, L]
    flat = (starts[:, None] + pos[None, :]).clamp(max=max(kv_indices.shape[0] - 1, 0))
    rows = kv_indices.to(torch.int64)[flat] if kv_indices.numel() else torch.zeros_like(flat)

    keys = k_cache[:, 0].to(torch.float32)[rows]                           # [B, L, KVH, D]
    values = v_cache[:, 0].to(torch.float32)[rows]                         # [B, L, KVH, D]
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
