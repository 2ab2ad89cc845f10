"""Baselines for this MoE (not FlashInfer): the strongest plain-PyTorch version we could write, the
cuBLASLt FP8 block-scale GEMMs a Hopper user would reach for, and SGLang's Triton fused MoE with block FP8
(`sglang_triton_fused_moe_fp8`, the kernels SGLang serves DeepSeek-V3 with on Hopper, imported from the
installed sglang package by sglang_peer.py beside this file; its docstring says what is SGLang's and what
is ours).

FlashInfer's `trtllm_fp8_block_scale_moe` (what FlashInfer-Bench times) runs only on Blackwell, and
its Hopper substitute (`cutlass_fused_moe` with DeepSeek FP8 block scales) is a CUTLASS JIT module
that did not finish building within 9 minutes on the H200 host (reference/gpu-findings.md). So the
baseline here is PyTorch, and its name says so:

- routing vectorised on the device (sigmoid, group top-2 sums, top-4 groups, top-8, normalise);
- token-expert pairs sorted by local expert with one argsort; the only host sync is reading the
  32 per-expert counts, which is needed to slice the sorted pairs;
- per active expert only (experts with no tokens are skipped), its FP8 weights are dequantised
  blockwise to bf16 once per call and fed to bf16 `torch.mm` (fp32 accumulation inside cuBLAS, and
  fp32 results where this torch has `out_dtype`); activations are dequantised to bf16 once per call;
- SwiGLU in fp32, the second GEMM in bf16, routing weights applied and rows scattered with
  `index_add_` into an fp32 output, cast to bf16 at the end.

Runs on a CPU too (slowly), which the tests use at reduced sizes.

`cublaslt_fp8_blockscale` is what serving code on Hopper does with DeepSeek's FP8 checkpoints: the same
routing and expert-major sort, then per active expert two cuBLASLt FP8 GEMMs with DeepSeek block scales
through `torch._scaled_mm` (1x128 activation blocks, 128x128 weight blocks; no dequantised weights), the
SwiGLU in fp32 on GEMM1's output, the intermediate requantised to FP8 per 1x128 block (scale = amax /
448), and a weighted scatter-add of GEMM2's rows. One deviation, for correctness: a single FP8 rounding
of the intermediate (what serving stacks do) errs by ~2% per output element and fails this task's 1%
rule (68% of elements matched on the tiny workloads), so the intermediate goes to GEMM2 as two FP8 terms,
its rounding and the rounding's residual, stacked as 2n rows of one GEMM (GEMM2 costs twice its FLOPs,
the whole MoE 4/3; weights are still read once, as FP8). On a CPU (tests only) each `_scaled_mm` is replaced
by the fp32 product of the dequantised operands, so the same data flow and quantisation are checked.
"""

import torch

N_GROUP, TOPK_GROUP, TOP_K, BLOCK, NUM_LOCAL = 8, 4, 8, 128, 32


def _route(logits, bias, scaling):
    t, e = logits.shape
    scores = torch.sigmoid(logits.float())
    biased = scores + bias.float()
    group_scores = biased.view(t, N_GROUP, e // N_GROUP).topk(2, dim=-1).values.sum(-1)
    keep_groups = group_scores.topk(TOPK_GROUP, dim=-1).indices
    group_mask = torch.zeros(t, N_GROUP, dtype=torch.bool, device=logits.device).scatter_(1, keep_groups, True)
    candidates = biased.view(t, N_GROUP, -1).masked_fill(~group_mask[:, :, None], float("-inf")).view(t, e)
    ids = candidates.topk(TOP_K, dim=-1).indices
    chosen = scores.gather(1, ids)
    weights = chosen * (float(scaling) / (chosen.sum(-1, keepdim=True) + 1e-20))
    return ids, weights


def _dequant_bf16(w, s):
    """[R, C] fp8 with [R/128, C/128] fp32 block scales -> bf16 [R, C].

    fp8 -> bf16 is exact; the in-place multiply by the fp32 scale computes in fp32 and rounds once
    (rounding the scale to bf16 first would bias whole 128x128 blocks and fail the 1% rule).
    """
    r, c = w.shape
    return (w.to(torch.bfloat16).view(r // BLOCK, BLOCK, c // BLOCK, BLOCK)
            .mul_(s[:, None, :, None]).view(r, c))


_FP32_OUT_MM = {}


def _mm_fp32(a, b):
    """bf16 x bf16 -> fp32 without rounding the product to bf16.

    CUDA: `out_dtype` (torch >= 2.8), else a bf16 result widened. CPU (tests only): an fp32 matmul,
    exact on bf16-valued operands.
    """
    if a.device.type == "cpu":
        return a.float() @ b.float()
    key = a.device.type
    if key not in _FP32_OUT_MM:
        try:
            probe = torch.ones(2, 2, dtype=torch.bfloat16, device=a.device)
            _FP32_OUT_MM[key] = torch.mm(probe, probe, out_dtype=torch.float32).dtype == torch.float32
        except (TypeError, RuntimeError, NotImplementedError):
            _FP32_OUT_MM[key] = False
    if _FP32_OUT_MM[key]:
        return torch.mm(a, b, out_dtype=torch.float32)
    return torch.mm(a, b).float()


def torch_grouped_fp8_dequant(inputs):
    logits, bias = inputs["routing_logits"], inputs["routing_bias"]
    hs, hs_scale = inputs["hidden_states"], inputs["hidden_states_scale"]
    w1, s1, w2, s2 = (inputs[k] for k in ("gemm1_weights", "gemm1_weights_scale", "gemm2_weights", "gemm2_weights_scale"))
    offset, scaling = int(inputs["local_expert_offset"]), float(inputs["routed_scaling_factor"])
    num_tokens, hidden = hs.shape
    inter = w2.shape[2]

    def call():
        ids, weights = _route(logits, bias, scaling)
        local = ids - offset
        local = torch.where((local >= 0) & (local < NUM_LOCAL), local, NUM_LOCAL).view(-1)
        order = torch.argsort(local, stable=True)
        counts = torch.bincount(local, minlength=NUM_LOCAL + 1)[:NUM_LOCAL]
        tokens = order // TOP_K
        pair_weights = weights.view(-1)[order]
        act = (hs.to(torch.bfloat16).view(num_tokens, hidden // BLOCK, BLOCK)
               .mul_(hs_scale.t()[:, :, None]).view(num_tokens, hidden))
        out = torch.zeros(num_tokens, hidden, dtype=torch.float32, device=hs.device)
        start = 0
        for e, n in enumerate(counts.tolist()):          # the one host sync
            if n == 0:
                continue
            tok = tokens[start:start + n]
            g = _mm_fp32(act[tok], _dequant_bf16(w1[e], s1[e]).t())          # [n, 2I]
            c = (torch.nn.functional.silu(g[:, inter:]) * g[:, :inter]).to(torch.bfloat16)
            o = _mm_fp32(c, _dequant_bf16(w2[e], s2[e]).t())                  # [n, H]
            out.index_add_(0, tok, o.mul_(pair_weights[start:start + n, None]))
            start += n
        return out.to(torch.bfloat16)

    return call


FP8_MAX = 448.0
ROW_ALIGN = 16


def _fp8_rows(x):
    """[M, K] float -> FP8 e4m3 values and fp32 scales [M, K/128] (amax / 448 per 1x128 block)."""
    m, k = x.shape
    blocks = x.float().view(m, k // BLOCK, BLOCK)
    scale = blocks.abs().amax(dim=-1).clamp(min=1e-10) / FP8_MAX
    q = (blocks / scale[:, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.view(m, k), scale


def _fp8_two_terms(x):
    """[M, K] -> FP8 rows [2M, K] and scales [2M, K/128]: x quantised per 1x128 block, then what that
    rounding left over, quantised the same way; the two halves sum to x within ~2^-8 relative."""
    hi, hi_scale = _fp8_rows(x)
    m, k = x.shape
    rest = x - (hi.float().view(m, k // BLOCK, BLOCK) * hi_scale[:, :, None]).view(m, k)
    lo, lo_scale = _fp8_rows(rest)
    return torch.cat([hi, lo]), torch.cat([hi_scale, lo_scale])


def _gemm_fp8_blockscale(a, a_scale, w, w_scale):
    """a [M, K] fp8 with per-(row, 128 columns) scales [M, K/128]; w [N, K] fp8 with 128x128 block scales
    [N/128, K/128]; returns a @ w^T dequantised, in fp32 (bf16 from cuBLASLt on the GPU).

    cuBLASLt wants scale_a column-major and scale_b as the transposed view of the (N/128, K/128) tensor.
    """
    if a.device.type == "cuda":
        m = a.shape[0]
        pad = -m % ROW_ALIGN          # cuBLASLt refuses block-scaled FP8 with a row count off this multiple
        if pad:
            a = torch.cat([a.view(torch.uint8), a.new_zeros(pad, a.shape[1], dtype=torch.uint8)]).view(a.dtype)
            a_scale = torch.cat([a_scale, a_scale.new_ones(pad, a_scale.shape[1])])
        out = torch._scaled_mm(a, w.t(), scale_a=a_scale.t().contiguous().t(), scale_b=w_scale.t(),
                               out_dtype=torch.bfloat16)
        return out[:m].float()
    m, k = a.shape
    n = w.shape[0]
    a32 = (a.float().view(m, k // BLOCK, BLOCK) * a_scale[:, :, None]).view(m, k)
    w32 = (w.float().view(n // BLOCK, BLOCK, k // BLOCK, BLOCK) * w_scale[:, None, :, None]).view(n, k)
    return a32 @ w32.t()


def cublaslt_fp8_blockscale(inputs):
    logits, bias = inputs["routing_logits"], inputs["routing_bias"]
    hs, hs_scale = inputs["hidden_states"], inputs["hidden_states_scale"]
    w1, s1, w2, s2 = (inputs[k] for k in ("gemm1_weights", "gemm1_weights_scale", "gemm2_weights", "gemm2_weights_scale"))
    offset, scaling = int(inputs["local_expert_offset"]), float(inputs["routed_scaling_factor"])
    num_tokens, hidden = hs.shape
    inter = w2.shape[2]

    def call():
        ids, weights = _route(logits, bias, scaling)
        local = ids - offset
        local = torch.where((local >= 0) & (local < NUM_LOCAL), local, NUM_LOCAL).view(-1)
        order = torch.argsort(local, stable=True)
        counts = torch.bincount(local, minlength=NUM_LOCAL + 1)[:NUM_LOCAL]
        tokens = order // TOP_K
        pair_weights = weights.view(-1)[order]
        # Gathers of FP8 rows go through a uint8 view (index kernels for float8 vary across torch builds).
        hs_bytes = hs.view(torch.uint8)
        token_scale = hs_scale.t()                                           # [T, H/128], a view
        out = torch.zeros(num_tokens, hidden, dtype=torch.float32, device=hs.device)
        start = 0
        for e, n in enumerate(counts.tolist()):          # the one host sync
            if n == 0:
                continue
            tok = tokens[start:start + n]
            a = hs_bytes[tok].view(torch.float8_e4m3fn)                      # [n, H]
            g = _gemm_fp8_blockscale(a, token_scale[tok], w1[e], s1[e])      # [n, 2I]
            c = torch.nn.functional.silu(g[:, inter:]) * g[:, :inter]        # silu(gate) * up, fp32
            o = _gemm_fp8_blockscale(*_fp8_two_terms(c), w2[e], s2[e])      # [2n, H]: value rows, residual rows
            o = o[:n] + o[n:]
            out.index_add_(0, tok, o.mul_(pair_weights[start:start + n, None]))
            start += n
        return out.to(torch.bfloat16)

    return call


def _sglang_peer():
    """The adapter beside this file (sglang_peer.py), loaded the way the task's modules are loaded."""
    from pathlib import Path

    from ksearch.task.registry import task_module

    return task_module(Path(__file__).parent, "sglang_peer")


def sglang_triton_fused_moe_fp8(inputs, *, exact_serving=False, config_experts=None, work_dtype=None,
                                sglang_router=False):
    """SGLang's Triton fused MoE (block FP8) from the installed sglang package: see sglang_peer.py.

    Routing is the task's (`_route`), or with `sglang_router` SGLang's router kernel computing the same
    routing; local ids outside this rank become -1. Planning (SGLang's weight
    layout, its config pick) happens here, once; the call aligns, runs SGLang's kernels and returns bf16.
    Raises PeerUnavailable (recorded by the judge as this baseline's failure) where sglang is absent.
    """
    peer = _sglang_peer()
    peer.load()
    logits, bias = inputs["routing_logits"], inputs["routing_bias"]
    offset, scaling = int(inputs["local_expert_offset"]), float(inputs["routed_scaling_factor"])
    hs, hs_scale_t = inputs["hidden_states"], inputs["hidden_states_scale"].t()      # [T, H/128], a view
    plan = peer.plan(inputs, TOP_K, config_experts)
    dtype = work_dtype or torch.bfloat16

    def call():
        if sglang_router:
            ids, weights = peer.route(logits, bias, scaling, TOP_K, N_GROUP, TOPK_GROUP)
        else:
            ids, weights = _route(logits, bias, scaling)
        local = ids - offset
        local = torch.where((local >= 0) & (local < NUM_LOCAL), local, -1)
        return peer.fused_experts(plan, hs, hs_scale_t, weights, local, exact_serving=exact_serving,
                                  work_dtype=dtype)

    call.sglang_config = {"config": plan.config, "down_config": plan.down_config,  # type: ignore[attr-defined]
                          "source": plan.config_source}
    return call


BASELINES = {
    # FlashInfer's MoE cannot be built on the H200 within limits; this is our best PyTorch version.
    "torch_grouped_fp8_dequant": torch_grouped_fp8_dequant,
    # cuBLASLt FP8 GEMMs with DeepSeek block scales (torch._scaled_mm), per expert: a Hopper user's choice.
    "cublaslt_fp8_blockscale": cublaslt_fp8_blockscale,
    # What SGLang runs for DeepSeek-V3 FP8 on Hopper: its Triton fused-MoE kernels, from the installed
    # package (absent: this baseline fails with the reason and the others still run).
    "sglang_triton_fused_moe_fp8": sglang_triton_fused_moe_fp8,
    # SGLang as a tuned deployment runs it: its router kernel too, and the package's tuned H200 tiles of the
    # same GEMM shapes (its E=72, N=2048 file; no E=32 file ships, so untuned SGLang uses the default tiles).
    "sglang_triton_fused_moe_fp8_tuned": lambda inputs, **kw: sglang_triton_fused_moe_fp8(
        inputs, config_experts=72, sglang_router=True, **kw),
}
