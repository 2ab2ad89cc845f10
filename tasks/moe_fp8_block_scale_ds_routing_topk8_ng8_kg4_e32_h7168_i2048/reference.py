import torch

NUM_EXPERTS = 256
NUM_LOCAL_EXPERTS = 32
N_GROUP = 8
TOPK_GROUP = 4
TOP_K = 8
BLOCK = 128


def route(routing_logits, routing_bias, routed_scaling_factor):
    """DeepSeek-V3 no-aux routing. Returns (topk_ids [T, 8] int64 global ids, topk_weights [T, 8] fp32)."""
    num_tokens, num_experts = routing_logits.shape
    assert num_experts == NUM_EXPERTS
    group_size = num_experts // N_GROUP
    scores = torch.sigmoid(routing_logits.to(torch.float32))                  # s, used for the weights
    biased = scores + routing_bias.to(torch.float32)[None, :]                 # s', used for the selection
    grouped = biased.view(num_tokens, N_GROUP, group_size)
    group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)                 # [T, 8]: sum of the top-2 s'
    top_groups = group_scores.topk(TOPK_GROUP, dim=-1).indices                # [T, 4]
    group_keep = torch.zeros(num_tokens, N_GROUP, dtype=torch.bool, device=scores.device)
    group_keep.scatter_(1, top_groups, True)
    expert_keep = group_keep[:, :, None].expand(num_tokens, N_GROUP, group_size).reshape(num_tokens, num_experts)
    candidates = biased.masked_fill(~expert_keep, float("-inf"))
    topk_ids = candidates.topk(TOP_K, dim=-1).indices                         # [T, 8], by s' among kept groups
    chosen = scores.gather(1, topk_ids)                                       # s WITHOUT the bias
    topk_weights = chosen / (chosen.sum(dim=-1, keepdim=True) + 1e-20) * float(routed_scaling_factor)
    return topk_ids, topk_weights


@torch.no_grad()
def run(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale,
        gemm2_weights, gemm2_weights_scale, local_expert_offset, routed_scaling_factor):
    # Sizes come from the shapes (the dataset has H = 7168, I = 2048; reduced CPU workloads shrink them).
    num_tokens, hidden = hidden_states.shape
    num_local, gemm1_out, _ = gemm1_weights.shape
    inter = gemm1_out // 2
    assert num_local == NUM_LOCAL_EXPERTS and hidden % BLOCK == 0 and inter % BLOCK == 0
    hb, ib, gb = hidden // BLOCK, inter // BLOCK, gemm1_out // BLOCK
    assert hidden_states_scale.shape == (hb, num_tokens)
    assert gemm1_weights_scale.shape == (num_local, gb, hb)
    assert gemm2_weights.shape == (num_local, hidden, inter)
    assert gemm2_weights_scale.shape == (num_local, hb, ib)
    device = hidden_states.device
    offset = int(local_expert_offset)

    topk_ids, topk_weights = route(routing_logits, routing_bias, routed_scaling_factor)

    # Activations: A[t, k] = hs[t, k] * hs_scale[k // 128, t] (the scale is stored transposed).
    act = (hidden_states.to(torch.float32).view(num_tokens, hb, BLOCK)
           * hidden_states_scale.to(torch.float32).t()[:, :, None]).view(num_tokens, hidden)

    output = torch.zeros(num_tokens, hidden, dtype=torch.float32, device=device)
    for le in range(num_local):
        ge = offset + le
        picked = topk_ids == ge                                                # [T, 8]
        rows = picked.any(dim=1).nonzero().squeeze(1)
        if rows.numel() == 0:
            continue
        weight = (topk_weights * picked).sum(dim=1)[rows]                     # [Tk]
        # Dequantise this expert's weights only: W[n, k] = w[n, k] * s[n // 128, k // 128].
        w13 = (gemm1_weights[le].to(torch.float32).view(gb, BLOCK, hb, BLOCK)
               * gemm1_weights_scale[le].to(torch.float32)[:, None, :, None]).view(gemm1_out, hidden)
        w2 = (gemm2_weights[le].to(torch.float32).view(hb, BLOCK, ib, BLOCK)
              * gemm2_weights_scale[le].to(torch.float32)[:, None, :, None]).view(hidden, inter)
        g = act[rows] @ w13.t()                                                # [Tk, 2I]
        up, gate = g[:, :inter], g[:, inter:]
        c = gate / (1.0 + torch.exp(-gate)) * up                               # silu(gate) * up
        o = c @ w2.t()                                                         # [Tk, H]
        output.index_add_(0, rows, o * weight[:, None])
    return output.to(torch.bfloat16)
