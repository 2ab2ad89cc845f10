"""The FP8 MoE family grouped_fp8_twoterm (issue 24) and its GPU sweep script, on the CPU.

The family's interpreter runs on the tiny workloads (defaults and tactics) are in test_task_moe.py, with the
other families; here: the sizes its host code derives from T at the edges of its paths, an offline sm_90
compile of its GEMMs (shared memory, spills), and benchmarks/moe_sweep.py in --smoke mode.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch

from ksearch.eval.interpreter import prepare_interpreter
from ksearch.eval.trusted.rules import check_outputs
from ksearch.instantiate.loader import load_entry_point
from ksearch.task import load_task
from ksearch.task.catalog import load_catalog
from tests.compiled_process import run_compiled

TASK = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
FAMILY = "grouped_fp8_twoterm"


@pytest.fixture(scope="module")
def task():
    return load_task(TASK)


def _tiny_workload(task, num_tokens, offset, hot=None):
    wl = task.workloads_module
    return wl._workload(f"fam_t{num_tokens}_off{offset}", num_tokens, offset, hidden=wl.TINY_HIDDEN,
                        inter=wl.TINY_INTER, hot_expert=hot)


@pytest.mark.parametrize("num_tokens,knobs", [
    (64, {}),                                               # the largest one-program route + sort (BLOCK_T 64)
    (65, {"programs_per_sm": 2, "combine": "gather_bf16"}),  # the smallest three-launch routing
    (16, {"fused_route_max_t": 0, "block_n": 32, "block_n2": 32, "gemm2": "bf16_wscaled"}),
    # the defaults above T=1024: operands through TMA boxes (rows past an expert's end read and never stored, the
    # hot expert over several M-blocks), 128 x (128 + 128) GEMM1 tiles, bf16 rows gathered
    (1100, {}),
    (70, {"operands": "tma", "swap_ab": True, "gemm1_dot": "split", "combine": "atomic", "block_n": 32,
          "block_n2": 32, "gemm2": "bf16_wscaled"}),
])
def test_routing_paths_at_their_edges(task, num_tokens, knobs):
    prepare_interpreter()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        w = _tiny_workload(task, num_tokens, 32, hot=7)
        inputs = task.make_inputs(w, device="cpu", seed=w.input_seed(0))
        run = load_entry_point(load_catalog(task.strategies_dir, TASK).render(FAMILY, knobs), name_hint="moe_edges")
        c = task.correctness
        res = check_outputs([run(**inputs)], [task.reference(**inputs)], ["output"], atol=c.atol, rtol=c.rtol,
                            required_matched_ratio=c.required_matched_ratio)
    finally:
        torch.set_num_threads(before)
    assert res.passed, res.message


def _benchmark(name):
    """A script of benchmarks/ as a module (the folder is not a package)."""
    import importlib.util

    from ksearch import PROJECT_ROOT

    spec = importlib.util.spec_from_file_location(name, PROJECT_ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module                  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _compile_gemms_for_sm90():
    """[(T, kernel, shared bytes, stack bytes)] of the family's GEMMs at its defaults, compiled for sm_90 from
    the launches `run()` makes at T (reduced H and I, same tile constants as at real sizes)."""
    report = _benchmark("sm90_compile_report").report
    task = load_task(TASK)
    out = []
    for num_tokens in (1, 14107):
        rows = report(TASK, FAMILY, [{}], workload=_tiny_workload(task, num_tokens, 32),
                      kernels=("_gemm1_swiglu", "_gemm2"))
        out += [(num_tokens, r.get("kernel"), r.get("shared"), r.get("stack"), r.get("error")) for r in rows]
    return out


def test_gemms_compile_for_sm90_within_their_spill_bounds():
    pytest.importorskip("triton.backends.nvidia.compiler")

    script = "import json, tests.test_moe_fp8_family as t; print(json.dumps(t._compile_gemms_for_sm90()))"
    proc = run_compiled(["-c", script], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(rows) == 4, rows
    for num_tokens, kernel, shared, stack, error in rows:
        assert error is None, (num_tokens, kernel, error)
        assert shared <= 232448, (num_tokens, kernel, shared)
        if stack is not None:                   # None: this Triton carries no cuobjdump
            # Large T's GEMM1 (128 x (128 + 128) tiles, 8 warps, TMA operands) spills ~100 B here and was still
            # the fastest GEMM1 tile on an H100 (2026-12-06: 6.45 against 6.74 ms at T=11948 for 64-column
            # tiles): a small spill is allowed there, nothing more, and none anywhere else.
            limit = 128 if (num_tokens, kernel) == (14107, "_gemm1_swiglu") else 0
            assert stack <= limit, (num_tokens, kernel, stack)


def test_sweep_settings_are_valid_knobs(task):
    moe_sweep = _benchmark("moe_sweep")
    cat = load_catalog(task.strategies_dir, TASK)
    for group in (moe_sweep._DECODE, moe_sweep._MIDDLE, moe_sweep._PREFILL):
        assert len({moe_sweep.label(f, k) for f, k in group}) == len(group)      # no setting twice
        for family, knobs in group:
            compile(cat.render(family, knobs), moe_sweep.label(family, knobs), "exec")


def test_sweep_smoke(tmp_path, capsys):
    moe_sweep = _benchmark("moe_sweep")
    assert moe_sweep.main([str(tmp_path), "--smoke"]) == 0
    doc = json.loads((tmp_path / "moe_sweep.json").read_text())
    assert [r["status"] for r in doc["rows"]] == ["ok"] * 6, [r["error"] for r in doc["rows"]]
    assert all(r["matched"] >= 0.95 and r["ms"] > 0 for r in doc["rows"])
    out = capsys.readouterr().out
    assert "best per T" in out and f"{FAMILY}[defaults]" in out


def test_two_fp8_terms_pass_the_rule_where_one_fails_at_real_sizes(task):
    """Why the family stores the SwiGLU output as hi + lo (H=7168, I=2048, 8 tokens x 2 experts, CPU): one FP8
    rounding per 1x128 block (or even 1x32) leaves far fewer than 95% of elements within the 1% rule, the
    template's two-term split (same scale, lo = fp8(c / s - hi)) matches them all."""
    wl = task.workloads_module
    hidden, inter, block = wl.HIDDEN, wl.INTER, wl.BLOCK
    gen = torch.Generator().manual_seed(3)

    def dequant(q, s, rows):
        r, c = q.shape
        return (q.float().view(r // rows, rows, c // block, block) * s[:, None, :, None]).view(r, c)

    def fp8_terms(c, group, two):
        v = c.view(c.shape[0], -1, group)
        s = v.abs().amax(-1, keepdim=True).clamp(min=1e-30) / 448.0
        x = (v / s).clamp(-448.0, 448.0)
        hi = x.to(torch.float8_e4m3fn).float()
        lo = (x - hi).to(torch.float8_e4m3fn).float() if two else torch.zeros_like(hi)
        return ((hi + lo) * s).view_as(c)

    tokens = 8
    act = (torch.randn(tokens, hidden, generator=gen) * wl._block_factor(tokens, hidden, 1, gen, "cpu"))
    a = dequant(*wl._quantise(act.bfloat16().float(), 1), 1)
    outs = {k: torch.zeros(tokens, hidden) for k in ("exact", "one_1x128", "one_1x32", "two_1x128", "two_1x64")}
    for _ in range(2):
        w1 = torch.randn(2 * inter, hidden, generator=gen) * hidden ** -0.5
        w1 = dequant(*wl._quantise((w1 * wl._block_factor(2 * inter, hidden, block, gen, "cpu")).bfloat16().float(),
                                   block), block)
        w2 = torch.randn(hidden, inter, generator=gen) * inter ** -0.5
        w2 = dequant(*wl._quantise((w2 * wl._block_factor(hidden, inter, block, gen, "cpu")).bfloat16().float(),
                                   block), block)
        g = a @ w1.t()
        c = torch.nn.functional.silu(g[:, inter:]) * g[:, :inter]
        del w1, g
        outs["exact"] += c @ w2.t()
        outs["one_1x128"] += fp8_terms(c, 128, False) @ w2.t()
        outs["one_1x32"] += fp8_terms(c, 32, False) @ w2.t()
        outs["two_1x128"] += fp8_terms(c, 128, True) @ w2.t()
        outs["two_1x64"] += fp8_terms(c, 64, True) @ w2.t()
    ref = outs["exact"].bfloat16()
    matched = {k: check_outputs([o.bfloat16()], [ref], ["output"], atol=0.01, rtol=0.01,
                                required_matched_ratio=0.95).matched_ratio for k, o in outs.items()}
    assert matched["one_1x128"] < 0.8 and matched["one_1x32"] < 0.85, matched
    assert matched["two_1x128"] > 0.999 and matched["two_1x64"] > 0.999, matched


# ---- on a GPU ---------------------------------------------------------------------------------------------
# Every GEMM1 path x GEMM2 kind at real sizes (H 7168, I 2048), decode and middle T: on an H100 with Triton 3.6
# (2026-12-05, benchmarks/h100-2026-12-05/s13_moe_aa7a569) split GEMM1 without swap_ab and with the fp8x2 GEMM2
# wrote NaN at every T, where the interpreter is right; the other paths were correct. An XPASS says it is fixed.
_PATHS = [(dot, swap, gemm2) for dot in ("split", "joint") for swap in (False, True) for gemm2 in ("fp8x2", "bf16")]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("seq_len", [1, 901])
@pytest.mark.parametrize("dot,swap,gemm2", [
    pytest.param(*p, marks=pytest.mark.xfail(reason="NaN on an H100, Triton 3.6 (2026-12-05)", strict=False))
    if p == ("split", False, "fp8x2") else p for p in _PATHS])
def test_every_gemm_path_matches_the_reference_on_the_gpu(task, seq_len, dot, swap, gemm2):
    w = task.workloads_module._workload(f"gpu_paths_t{seq_len}", seq_len, 32)
    inputs = task.make_inputs(w, device="cuda", seed=w.input_seed(0))
    knobs = {"gemm1_dot": dot, "swap_ab": swap, "gemm2": gemm2}
    run = load_entry_point(load_catalog(task.strategies_dir, TASK).render(FAMILY, knobs),
                           name_hint=f"moe_paths_gpu_{dot}_{int(swap)}_{gemm2}")
    got = run(**inputs)
    torch.cuda.synchronize()
    assert torch.isfinite(got.float()).all(), f"{int((~torch.isfinite(got.float())).sum())} non-finite values"
    c = task.correctness
    res = check_outputs([got], [task.reference(**inputs)], ["output"], atol=c.atol, rtol=c.rtol,
                        required_matched_ratio=c.required_matched_ratio)
    assert res.passed, res.message
