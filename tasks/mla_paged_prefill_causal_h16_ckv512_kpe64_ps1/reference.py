import math

import torch

# Budget for each float32 temporary of one query chunk (logits, weights, upcast queries and outputs).
CHUNK_BYTES = 256 << 20


@torch.no_grad()
def run(q_nope, q_pe, ckv_cache, kpe_cache, qo_indptr, kv_indptr, kv_indices, sm_scale):
    total_q, num_qo_heads, head_dim_ckv = q_nope.shape
    head_dim_kpe = q_pe.shape[-1]
    page_size = ckv_cache.shape[1]
    assert num_qo_heads == 16 and head_dim_ckv == 512 and head_dim_kpe == 64 and page_size == 1
    assert qo_indptr.shape[0] == kv_indptr.shape[0]
    assert int(qo_indptr[-1].item()) <= total_q
    assert kv_indices.shape[0] == int(kv_indptr[-1].item())
    device = q_nope.device
    batch = qo_indptr.shape[0] - 1

    q_starts = qo_indptr[:-1].to(torch.int64)
    q_lens = (qo_indptr[1:] - qo_indptr[:-1]).to(torch.int64)
    kv_starts = kv_indptr[:-1].to(torch.int64)
    kv_lens = (kv_indptr[1:] - kv_indptr[:-1]).to(torch.int64)
    assert bool((kv_lens >= q_lens).all()), "every sequence needs kv_len >= q_len"
    prefix = kv_lens - q_lens                       # query i of sequence b sits at KV position prefix[b] + i

    output = torch.zeros(total_q, num_qo_heads, head_dim_ckv, dtype=torch.bfloat16, device=device)
    lse = torch.full((total_q, num_qo_heads), float("-inf"), dtype=torch.float32, device=device)
    if batch == 0 or int(q_lens.sum().item()) == 0:
        return output, lse

    # Pad the KV of every sequence to the longest one; gather the referenced rows (bf16), then upcast.
    max_kv = max(int(kv_lens.max().item()), 1)
    kv_pos = torch.arange(max_kv, device=device)
    flat = (kv_starts[:, None] + kv_pos[None, :]).clamp(max=max(kv_indices.shape[0] - 1, 0))
    rows = kv_indices.to(torch.int64)[flat] if kv_indices.numel() else torch.zeros_like(flat)
    ckv = ckv_cache[:, 0][rows].to(torch.float32)                          # [B, Lk, 512] keys and values
    kpe = kpe_cache[:, 0][rows].to(torch.float32)                          # [B, Lk, 64]

    # Pad the queries too and walk them in chunks so each float32 temporary stays within CHUNK_BYTES.
    max_q = int(q_lens.max().item())
    per_query = batch * num_qo_heads * (max_kv + head_dim_ckv + head_dim_kpe + head_dim_ckv) * 4
    chunk = max(1, min(max_q, CHUNK_BYTES // per_query))
    for c0 in range(0, max_q, chunk):
        qi = torch.arange(c0, min(c0 + chunk, max_q), device=device)        # query index within its sequence
        q_valid = qi[None, :] < q_lens[:, None]                             # [B, C]
        q_rows = (q_starts[:, None] + qi[None, :]).clamp(max=total_q - 1)   # [B, C]
        qn = q_nope[q_rows].to(torch.float32)                               # [B, C, H, 512]
        qp = q_pe[q_rows].to(torch.float32)                                 # [B, C, H, 64]
        logits = (torch.einsum("bchd,bld->bhcl", qn, ckv) + torch.einsum("bchd,bld->bhcl", qp, kpe)) * sm_scale
        visible = kv_pos[None, None, :] <= (prefix[:, None, None] + qi[None, :, None])   # [B, C, Lk]
        visible = visible & (kv_pos[None, None, :] < kv_lens[:, None, None])
        logits = logits.masked_fill(~visible[:, None, :, :], float("-inf"))             # [B, H, C, Lk]
        row_max = logits.amax(dim=-1, keepdim=True)
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        weights = torch.exp(logits - row_max)
        del logits
        denom = weights.sum(dim=-1, keepdim=True)
        probs = weights / denom.clamp(min=1e-30)
        del weights
        out = torch.einsum("bhcl,bld->bchd", probs, ckv)                   # [B, C, H, 512]
        lse_e = (torch.log(denom) + row_max).squeeze(-1).permute(0, 2, 1)    # [B, C, H]
        dest = q_rows[q_valid]
        output[dest] = out[q_valid].to(torch.bfloat16)
        lse[dest] = (lse_e[q_valid] / math.log(2.0)).to(torch.float32)
    return output, lse
