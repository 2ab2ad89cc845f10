"""SGLang's Triton fused MoE (block-wise FP8 w8a8, blocks [128, 128]), imported from the installed `sglang`
package: the MoE kernel SGLang runs for DeepSeek-V3's FP8 checkpoints on Hopper.

What runs is the package's own code, from `sglang.kernels.ops.moe.fused_moe_triton_kernels`:
`invoke_fused_moe_kernel` (the `fused_moe_kernel` Triton GEMM over expert-sorted row blocks, with swap-AB
for small M on SM90 and PDL where SGLang enables them), `act_and_mul_triton` (SwiGLU) and
`moe_sum_reduce_triton` (the weighted top-k reduction); tile configs come from the package's
`get_moe_configs` (its tuned JSON files, when one matches) or `get_default_config`, as SGLang picks them;
`moe_align_small_numel` (one-launch alignment for tiny batches) and `moe_fused_gate` (its router).

Why not `sglang`'s `fused_experts` itself: its module imports SGLang's server stack (transformers, zmq,
PIL, starlette, ...) and, on CUDA, `sgl_kernel` (a 510 MB wheel; its `moe_align_block_size` and
`moe_sum_reduce`) and JIT CUDA modules; a GPU host gets 64 MiB per command. So this module imports the
kernel modules above without running `sglang/__init__.py` and registers small stand-ins for what
those modules import but the path used here never calls (platform probes answered from torch, the FP8
activation quantisers, which never run because activations arrive already in FP8; JIT builders for a router
path not taken). The orchestration below follows SGLang's `fused_experts_impl`; what differs is ours:

- the expert-major alignment above 64 token-expert pairs (`align_block_size`) is ours, in torch on the
  device, in SGLang's layout (SGLang's is a CUDA kernel in `sgl_kernel`); up to 64 pairs it is the
  package's one-launch Triton `moe_align_small_numel`;
- the checkpoint's W13 halves are [up; gate] and SGLang's are [gate; up]: they are swapped once when the
  call is planned (a load-time weight layout, outside the timed call);
- routing is the task's PyTorch code (baseline.py) or SGLang's router kernel (`route`: the package's
  `moe_fused_gate`, the same DeepSeek-V3 no-aux routing in one launch); global ids outside this rank map
  to -1, the expert-parallel convention SGLang's kernels skip (their output rows are written as zeros);
- the SwiGLU output goes to GEMM2 as two FP8 terms (its 1x128-block rounding and that rounding's residual)
  instead of one: a single FP8 rounding (what SGLang does) errs by ~2% per output element and fails this
  task's 1% rule. The two terms are stacked as a top-16 with each expert twice, so one GEMM2 launch reads
  each expert's W2 once per row block; GEMM2 does twice the rows (the whole MoE 4/3 of its FLOPs). Both
  terms come from one Triton launch of ours (`quantise_for_gemm2`), where SGLang runs one quant launch.
  `exact_serving=True` runs SGLang's single rounding instead (for timing next to the judged variant).
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import torch

from ksearch.task.registry import import_file

BLOCK = 128
FP8_MAX = 448.0
KERNELS = "sglang.kernels.ops.moe.fused_moe_triton_kernels"
CONFIGS = "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config"
SMALL_ALIGN = "sglang.kernels.ops.moe.moe_align_small_numel"
GATE = "sglang.kernels.ops.moe.moe_fused_gate"


class PeerUnavailable(RuntimeError):
    """The sglang package (or a module this adapter needs from it) is not importable here."""


def _cuda_capability_major() -> int:
    return torch.cuda.get_device_capability()[0] if torch.cuda.is_available() else 0


def _is_cuda() -> bool:
    return torch.cuda.is_available() and torch.version.cuda is not None


def _not_carried(name: str):
    def fail(*_a: Any, **_k: Any) -> Any:
        raise PeerUnavailable(f"{name} is a stand-in (activations arrive in FP8 here; it should not run)")
    return fail


def _stand_ins() -> dict[str, dict[str, Any]]:
    """Names the kernel modules import from modules that are not loaded, by module (see the docstring)."""
    def device_name(device_id: int = 0) -> str:
        return torch.cuda.get_device_name(device_id) if torch.cuda.is_available() else "cpu"

    utils = {
        "is_cuda": _is_cuda, "is_hip": lambda: torch.version.hip is not None, "is_cpu": lambda: False,
        "is_musa": lambda: False, "is_xpu": lambda: False, "is_npu": lambda: False,
        "cpu_has_amx_support": lambda: False, "get_device_name": device_name,
        "is_sm90_supported": lambda: _is_cuda() and _cuda_capability_major() == 9,
        "get_bool_env_var": lambda name, default="false": os.getenv(name, default).lower() in ("1", "true"),
        "ceil_align": lambda x, y: (x + y - 1) // y * y,
    }
    deterministic = types.SimpleNamespace(enable_deterministic_inference=False)
    quant = ("per_token_group_quant_fp8", "scaled_fp8_quant", "sglang_per_token_group_quant_fp8")
    int8 = ("per_token_group_quant_int8", "per_token_quant_int8", "sglang_per_token_group_quant_int8")
    return {
        "sglang.srt.utils": utils,
        "sglang.srt.runtime_context": {"get_exec": lambda: types.SimpleNamespace(deterministic=deterministic)},
        "sglang.srt.batch_invariant_ops": {"is_batch_invariant_mode_enabled": lambda: False},
        # SGLang's rule (sglang/srt/layers/moe/utils.py): pad K only when SGLANG_MOE_PADDING is set.
        "sglang.srt.layers.moe.utils": {"get_moe_padding_size": lambda aiter: 0},
        # PDL (programmatic dependent launch) where SGLang uses it: CUDA arch >= 9. The JIT builders are
        # imported by the router module for a radix path taken only without expert groups (never here).
        "sglang.kernels.jit.utils": {
            "is_arch_support_pdl": lambda: _is_cuda() and _cuda_capability_major() >= 9,
            "get_jit_cuda_arch": lambda: types.SimpleNamespace(
                major=_cuda_capability_major(), minor=torch.cuda.get_device_capability()[1] if _is_cuda() else 0),
            "cache_once": functools.cache,
            "load_jit": _not_carried("load_jit"), "make_cpp_args": _not_carried("make_cpp_args")},
        "sglang.kernels.ops.quantization.fp8_kernel": {n: _not_carried(n) for n in quant},
        "sglang.kernels.ops.quantization.int8_kernel": {n: _not_carried(n) for n in int8},
    }


def _package_dir() -> Path:
    spec = importlib.machinery.PathFinder.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise PeerUnavailable("the sglang package is not installed (on the GPU host: scripts/gpu_bundle_extra.sh)")
    return Path(list(spec.submodule_search_locations)[0])


def _register_packages(root: Path, dotted: str) -> None:
    """Every package on the way to `dotted` as a bare module over its folder (its __init__ is not run)."""
    parts = dotted.split(".")
    for i in range(1, len(parts)):
        name = ".".join(parts[:i])
        if name in sys.modules:
            continue
        folder = root.joinpath(*parts[1:i])
        mod = types.ModuleType(name)
        mod.__path__ = [str(folder)]
        mod.__package__ = name
        sys.modules[name] = mod


def _load_file(root: Path, dotted: str) -> types.ModuleType:
    if dotted in sys.modules:
        return sys.modules[dotted]
    _register_packages(root, dotted)
    path = root.joinpath(*dotted.split(".")[1:]).with_suffix(".py")
    if not path.is_file():
        raise PeerUnavailable(f"{dotted} is not in this sglang ({path})")
    return import_file(dotted, path)


class Sglang(NamedTuple):
    kernels: types.ModuleType          # fused_moe_triton_kernels
    configs: types.ModuleType          # fused_moe_triton_config
    small_align: types.ModuleType      # moe_align_small_numel (one-launch alignment for tiny batches)
    gate: types.ModuleType             # moe_fused_gate (SGLang's Triton DeepSeek-V3 router)
    version: str


@functools.lru_cache(maxsize=1)
def load() -> Sglang:
    """SGLang's fused-MoE kernel modules and the package version; PeerUnavailable if absent.

    sglang's own modules are used where they exist; a stand-in is registered only for a module not
    already imported (so a full sglang install, if one is ever present, keeps its own)."""
    root = _package_dir()
    if "sglang" not in sys.modules:
        _register_packages(root, "sglang.x")
    for name, attrs in _stand_ins().items():
        if name not in sys.modules:
            _register_packages(root, name)
            mod = types.ModuleType(name)
            mod.__dict__.update(attrs)
            mod.__ksearch_stand_in__ = True  # type: ignore[attr-defined]
            sys.modules[name] = mod
    _load_file(root, "sglang.srt.environ")
    kernels = _load_file(root, KERNELS)
    configs = _load_file(root, CONFIGS)
    small_align = _load_file(root, SMALL_ALIGN)
    gate = _load_file(root, GATE)
    version = "unknown"
    for info in root.parent.glob("sglang-*.dist-info"):
        version = info.name.removeprefix("sglang-").removesuffix(".dist-info")
    return Sglang(kernels, configs, small_align, gate, version)


def route(logits: torch.Tensor, bias: torch.Tensor, scaling: float, top_k: int, n_group: int, topk_group: int
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """DeepSeek-V3 no-aux routing by SGLang's router kernel (`moe_fused_gate`, one Triton launch): sigmoid
    scores, biased group top-2 sums, top groups, top-k, weights renormalised and scaled. Returns global
    ids [T, k] int32 and weights [T, k] fp32, as the task's routing defines them."""
    weights, ids = load().gate.moe_fused_gate(
        logits, bias, top_k, scoring_func="sigmoid", renormalize=True, routed_scaling_factor=scaling,
        apply_routed_scaling_factor_on_output=True, num_expert_group=n_group, topk_group=topk_group)
    return ids, weights


def _capacity(numel: int, block_m: int, buckets: int) -> int:
    """SGLang's size of sorted_token_ids (moe_align_block_size in its triton_utils)."""
    capacity = numel * block_m if numel < buckets else numel + buckets * (block_m - 1)
    return (capacity + 3) // 4 * 4


def align(sg: Sglang, topk_ids: torch.Tensor, block_m: int, num_experts: int
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The alignment SGLang would run: its one-launch Triton kernel for tiny batches (numel up to its
    SMALL_NUMEL_LIMIT, where SGLang's CUDA kernel would also take one launch); ours above that."""
    numel = topk_ids.numel()
    if numel > sg.small_align.SMALL_NUMEL_LIMIT:
        return align_block_size(topk_ids, block_m, num_experts)
    capacity = _capacity(numel, block_m, num_experts + 1)
    device = topk_ids.device
    sorted_ids = torch.empty(capacity, dtype=torch.int32, device=device)
    expert_ids = torch.empty(-(-capacity // block_m), dtype=torch.int32, device=device)
    post_pad = torch.empty(1, dtype=torch.int32, device=device)
    sg.small_align.moe_align_small_numel(topk_ids, num_experts + 1, block_m, sorted_ids, expert_ids, post_pad)
    return sorted_ids, expert_ids, post_pad


def align_block_size(topk_ids: torch.Tensor, block_m: int, num_experts: int
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SGLang's `moe_align_block_size` layout, in torch on the device (no host sync).

    topk_ids [T, k] int (local expert ids, -1 for none). Returns sorted_token_ids (int32: flat pair
    indices grouped by expert, invalid pairs first as SGLang's "+1 bucket" puts them, each group padded to a
    multiple of block_m with the value T*k), expert_ids (int32 per row block, -1 for the invalid bucket and
    unused blocks) and num_tokens_post_padded (int32 [1]). Buffers are sized as SGLang sizes them.
    """
    numel = topk_ids.numel()
    device = topk_ids.device
    buckets = num_experts + 1
    capacity = _capacity(numel, block_m, buckets)
    num_blocks = -(-capacity // block_m)
    bucket = (topk_ids.reshape(-1).to(torch.int64) + 1).clamp_(0, num_experts)       # -1 -> bucket 0
    # scatter_add_, not bincount: CUDA's bincount reads the input's max on the host (no graph capture then).
    counts = torch.zeros(buckets, dtype=torch.int64, device=device).scatter_add_(0, bucket, torch.ones_like(bucket))
    padded = (counts + block_m - 1) // block_m * block_m
    ends = torch.cumsum(padded, 0)
    starts = ends - padded
    order = torch.argsort(bucket, stable=True)
    rank = torch.arange(numel, device=device) - (torch.cumsum(counts, 0) - counts)[bucket[order]]
    sorted_ids = torch.full((capacity,), numel, dtype=torch.int32, device=device)
    sorted_ids[starts[bucket[order]] + rank] = order.to(torch.int32)
    block_start = torch.arange(num_blocks, device=device) * block_m
    block_bucket = torch.searchsorted(ends, block_start, right=True)
    expert_ids = torch.where(block_bucket < buckets, block_bucket - 1, -1).to(torch.int32)
    return sorted_ids, expert_ids, ends[-1:].to(torch.int32)


def fp8_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, K] float -> FP8 e4m3 [M, K] and fp32 scales [M, K/128] (amax / 448 per 1x128 block)."""
    m, k = x.shape
    blocks = x.float().view(m, k // BLOCK, BLOCK)
    scale = blocks.abs().amax(dim=-1).clamp(min=1e-10) / FP8_MAX
    q = (blocks / scale[:, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.view(m, k), scale


def fp8_two_terms(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """x's 1x128-block FP8 rounding and the FP8 rounding of what it left over (each with its scales)."""
    hi, hi_scale = fp8_blocks(x)
    m, k = x.shape
    rest = x.float() - (hi.float().view(m, k // BLOCK, BLOCK) * hi_scale[:, :, None]).view(m, k)
    lo, lo_scale = fp8_blocks(rest)
    return hi, hi_scale, lo, lo_scale


@functools.lru_cache(maxsize=1)
def _quant_kernel() -> Any:
    """One launch for the GEMM2 input, where SGLang runs one per-token-group quant launch: each program
    takes one row of the SwiGLU output, quantises every 1x128 block to FP8 (scale = amax / 448) and, with
    TWO_TERMS, also what that rounding left over, writing both straight into the stacked layout."""
    import triton
    import triton.language as tl

    @triton.jit
    def two_term_fp8(x_ptr, q_ptr, s_ptr, top_k, K: tl.constexpr, KB: tl.constexpr, TWO_TERMS: tl.constexpr):
        pair = tl.program_id(0)
        blocks = tl.arange(0, KB)
        cols = tl.arange(0, 128)
        offs = blocks[:, None] * 128 + cols[None, :]
        x = tl.load(x_ptr + pair.to(tl.int64) * K + offs).to(tl.float32)
        if TWO_TERMS:       # pair (t, j) -> rows t*2k + j (rounding) and t*2k + k + j (residual)
            row = (pair // top_k) * 2 * top_k + pair % top_k
        else:
            row = pair
        scale = tl.maximum(tl.max(tl.abs(x), axis=1), 1e-10) / 448.0
        q = tl.clamp(x / scale[:, None], -448.0, 448.0).to(tl.float8e4nv)
        tl.store(q_ptr + row.to(tl.int64) * K + offs, q)
        tl.store(s_ptr + row.to(tl.int64) * KB + blocks, scale)
        if TWO_TERMS:
            rest = x - q.to(tl.float32) * scale[:, None]
            scale2 = tl.maximum(tl.max(tl.abs(rest), axis=1), 1e-10) / 448.0
            q2 = tl.clamp(rest / scale2[:, None], -448.0, 448.0).to(tl.float8e4nv)
            tl.store(q_ptr + (row + top_k).to(tl.int64) * K + offs, q2)
            tl.store(s_ptr + (row + top_k).to(tl.int64) * KB + blocks, scale2)

    return two_term_fp8


def quantise_for_gemm2(act: torch.Tensor, top_k: int, two_terms: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The SwiGLU output [T*k, I] as GEMM2's FP8 input and its [rows, I/128] scales: one term per pair
    (SGLang's rounding), or two (rows t*2k + j and t*2k + k + j). CUDA: one Triton launch; CPU: torch."""
    pairs, inter = act.shape
    if act.device.type != "cuda":
        if not two_terms:
            return fp8_blocks(act)
        hi, hi_s, lo, lo_s = fp8_two_terms(act)
        t = pairs // top_k
        q = torch.stack([hi.view(t, top_k, inter), lo.view(t, top_k, inter)], 1).view(2 * pairs, inter)
        s = torch.stack([hi_s.view(t, top_k, -1), lo_s.view(t, top_k, -1)], 1).view(2 * pairs, -1)
        return q, s
    rows = 2 * pairs if two_terms else pairs
    q = torch.empty(rows, inter, dtype=torch.float8_e4m3fn, device=act.device)
    s = torch.empty(rows, inter // BLOCK, dtype=torch.float32, device=act.device)
    _quant_kernel()[(pairs,)](act, q, s, top_k, K=inter, KB=inter // BLOCK, TWO_TERMS=two_terms, num_warps=4)
    return q, s


@dataclass(frozen=True)
class Plan:
    """Weights in SGLang's layout and what SGLang would pick for this T."""

    w13: torch.Tensor            # [E, 2I, H] fp8, [gate; up]
    w13_scale: torch.Tensor      # [E, 2I/128, H/128]
    w2: torch.Tensor
    w2_scale: torch.Tensor
    config: dict[str, Any]       # GEMM1 (and GEMM2 unless down_config)
    down_config: dict[str, Any] | None
    config_source: str


def gate_up_layout(w13: torch.Tensor, s13: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The checkpoint's [up; gate] halves as SGLang's [gate; up] (a copy, made once per plan)."""
    inter, inter_blocks = w13.shape[1] // 2, s13.shape[1] // 2
    return (torch.cat([w13[:, inter:], w13[:, :inter]], dim=1),
            torch.cat([s13[:, inter_blocks:], s13[:, :inter_blocks]], dim=1))


def pick_config(configs: types.ModuleType, num_experts: int, inter: int, hidden: int, top_k: int, m: int,
                config_experts: int | None = None) -> tuple[dict[str, Any], dict[str, Any] | None, str]:
    """SGLang's choice (try_get_optimal_moe_config without an override): the tuned file for (E, N=I) on
    this device if the package has one, the nearest M in it; else its default for block FP8. With
    `config_experts`, the tuned file of another expert count is used (same N, same GEMM shapes)."""
    e = config_experts or num_experts
    table = configs.get_moe_configs(e, inter, "fp8_w8a8", BLOCK, BLOCK)
    if table:
        cfg = dict(table[min(table, key=lambda x: abs(x - m))])
        down = configs.get_moe_configs(e, inter, "fp8_w8a8", BLOCK, BLOCK, down_moe=True)
        down_cfg = dict(down[min(down, key=lambda x: abs(x - m))]) if down else None
        source = configs.get_config_file_name(e, inter, "fp8_w8a8", [BLOCK, BLOCK])
    else:
        cfg = dict(configs.get_default_config(m, num_experts, inter, hidden, top_k, "fp8_w8a8", False,
                                              [BLOCK, BLOCK]))
        down_cfg, source = None, "sglang default config (no tuned file for this E, N, device)"
    cfg.pop("USE_TMA", None)          # TMA variants are opt-in in SGLang and not used here
    if down_cfg is not None:
        down_cfg.pop("USE_TMA", None)
        down_cfg["BLOCK_SIZE_M"] = cfg["BLOCK_SIZE_M"]       # one alignment for both GEMMs, as in SGLang
    return cfg, down_cfg, source


def plan(inputs: dict[str, Any], top_k: int, config_experts: int | None = None) -> Plan:
    configs = load().configs
    w13, s13 = gate_up_layout(inputs["gemm1_weights"], inputs["gemm1_weights_scale"])
    num_experts, hidden, inter = inputs["gemm2_weights"].shape
    m = inputs["hidden_states"].shape[0]
    cfg, down, source = pick_config(configs, num_experts, inter, hidden, top_k, m, config_experts)
    return Plan(w13.contiguous(), s13.contiguous(), inputs["gemm2_weights"], inputs["gemm2_weights_scale"],
                cfg, down, source)


def fused_experts(p: Plan, hidden_states: torch.Tensor, hidden_scale_t: torch.Tensor, topk_weights: torch.Tensor,
                  topk_ids: torch.Tensor, *, exact_serving: bool = False,
                  work_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """SGLang's fused-MoE sequence on FP8 activations: align, GEMM1, SwiGLU, GEMM2 (weighted), top-k sum.

    hidden_states [T, H] fp8 with scales hidden_scale_t [T, H/128] (any strides); topk_ids [T, k] local
    ids (-1: not on this rank); topk_weights [T, k] fp32 (already scaled). Returns bf16 [T, H].
    """
    sg = load()
    kernels = sg.kernels
    from triton import language as tl

    num_tokens, top_k = topk_ids.shape
    num_experts, hidden, inter = p.w2.shape
    block = [BLOCK, BLOCK]
    common = dict(compute_type=tl.bfloat16, use_fp8_w8a8=True, use_int8_w8a8=False, use_int8_w8a16=False,
                  use_int4_w4a16=False, per_channel_quant=False, block_shape=block)
    ids = topk_ids.to(torch.int32)
    weights = topk_weights.to(torch.float32).contiguous()
    sorted_ids, expert_ids, post_pad = align(sg, ids, p.config["BLOCK_SIZE_M"], num_experts)
    gate_up = torch.empty(num_tokens * top_k, 2 * inter, dtype=work_dtype, device=hidden_states.device)
    kernels.invoke_fused_moe_kernel(hidden_states, p.w13, None, gate_up, hidden_scale_t, p.w13_scale, None,
                                    weights, ids, sorted_ids, expert_ids, post_pad, False, top_k, p.config,
                                    **common)
    act = torch.empty(num_tokens * top_k, inter, dtype=work_dtype, device=hidden_states.device)
    kernels.act_and_mul_triton(gate_up, act, p.config, ids, expert_ids, False, "silu")
    down_cfg = p.down_config or p.config
    a2, a2_scale = quantise_for_gemm2(act, top_k, not exact_serving)
    if exact_serving:
        ids2, weights2 = ids, weights
        sorted2, experts2, post2 = sorted_ids, expert_ids, post_pad
    else:       # each pair twice, one expert each: its rounding's row and its residual's row
        ids2 = torch.cat([ids, ids], 1).contiguous()
        weights2 = torch.cat([weights, weights], 1).contiguous()
        sorted2, experts2, post2 = align(sg, ids2, down_cfg["BLOCK_SIZE_M"], num_experts)
    k2 = ids2.shape[1]
    per_pair = torch.empty(num_tokens, k2, hidden, dtype=work_dtype, device=hidden_states.device)
    kernels.invoke_fused_moe_kernel(a2, p.w2, None, per_pair, a2_scale, p.w2_scale, None, weights2, ids2,
                                    sorted2, experts2, post2, True, 1, down_cfg, router_topk=k2, **common)
    out = torch.empty(num_tokens, hidden, dtype=work_dtype, device=hidden_states.device)
    kernels.moe_sum_reduce_triton(per_pair, out, 1.0)
    return out.to(torch.bfloat16)
