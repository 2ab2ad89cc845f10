import math

import torch


@torch.no_grad()
def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_indptr, kv_indices, sm_scale):
    batch_size, num_qo_heads, head_dim_ckv = q_nope.shape
    head_dim_kpe = q_pe.shape[-1]
    page_size = ckv_cache.shape[1]
    assert num_qo_heads == 16 and head_dim_ckv == 512 and head_dim_kpe == 64 and page_size == 1
    assert kv_indptr.shape[0] == batch_size + 1
    assert kv_indices.shape[0] == int(kv_indptr[-1].item())
    device = q_nope.device

    # Pad every sequence to the longest one and mask the tail: one batched computation, no Python loop.
    starts = kv_indptr[:-1].to(torch.int64)
    lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int64)
    max_len = max(int(lens.max().item()) if batch_size else 0, 1)
    pos = torch.arange(max_len, device=device)
    valid = pos[None, :] < lens[:, None]                                   # [B, L]
    flat = (starts[:, None] + pos[None, :]).clamp(max=max(kv_indices.shape[0] - 1, 0))
    rows = kv_indices.to(torch.int64)[flat] if kv_indices.numel() else torch.zeros_like(flat)

    # Gather the referenced rows first (bf16), then upcast only those: the cache is the whole token pool.
    ckv = ckv_cache[:, 0][rows].to(torch.float32)                          # [B, L, 512] keys and values
    kpe = kpe_cache[:, 0][rows].to(torch.float32)                          # [B, L, 64]
    qn = q_nope.to(torch.float32)
    qp = q_pe.to(torch.float32)

    logits = (torch.einsum("bhd,bld->bhl", qn, ckv) + torch.einsum("bhd,bld->bhl", qp, kpe)) * sm_scale
    logits = logits.masked_fill(~valid[:, None, :], float("-inf"))          # [B, H, L]
    row_max = logits.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    weights = torch.exp(logits - row_max)
    denom = weights.sum(dim=-1, keepdim=True)
    probs = weights / denom.clamp(min=1e-30)
    out = torch.einsum("bhl,bld->bhd", probs, ckv)                         # values are the ckv rows
    lse_e = (torch.log(denom) + row_max).squeeze(-1)                       # natural-log lse, -inf if empty

    output = out.to(torch.bfloat16)
    lse = (lse_e / math.log(2.0)).to(torch.float32)
    return output, lse
