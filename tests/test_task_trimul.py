"""The TriMul (outgoing, H=128) task: reference, workloads, the allclose rule, baselines, catalog families,
GPUMode-style timing and its script.

Without CUDA the templates run under the Triton interpreter on the `tiny` workloads (on a GPU machine the
same tests run them compiled, on the GPU); GPU tests (marked `gpu`) check the families and baselines
against the fp32 reference on real shapes.
"""

import json
import math

import pytest
import torch

from ksearch.eval.interpreter import prepare_interpreter
from tests.compiled_process import run_compiled

# The interpreter must be on before any Triton kernel is defined; on a GPU machine kernels run compiled.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    prepare_interpreter()

from ksearch.eval.parent.evaluator import EvalSettings, Evaluator
from ksearch.eval.report import BaselineTimes
from ksearch.eval.trusted.rules import check_outputs
from ksearch.instantiate.loader import load_entry_point
from ksearch.task import Correctness, load_task
from ksearch.task.catalog import load_catalog
from ksearch.task.gpumode_timing import CheckFailed, geometric_mean, mean_and_errors, time_case

TASK = "trimul_outgoing_h128"
BENCHMARK = [(256, 2, 128, False, "normal"), (768, 1, 128, False, "cauchy"), (256, 2, 384, True, "normal"),
             (512, 1, 128, False, "normal"), (1024, 1, 128, False, "cauchy"), (768, 1, 384, True, "normal"),
             (1024, 1, 384, False, "normal")]


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """Many small CPU ops: one intra-op thread is faster on a shared machine (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def task():
    return load_task(TASK)


@pytest.fixture(scope="module")
def tiny(task):
    """(workload, inputs, reference output) for every tiny workload, built once."""
    cases = []
    for w in task.workload_set("tiny"):
        inputs = task.make_inputs(w, device=DEVICE, seed=w.input_seed(0))
        cases.append((w, inputs, task.reference(**inputs)))
    return cases


def _rule(task, got, want):
    c = task.correctness
    return check_outputs([got], [want], ["out"], atol=c.atol, rtol=c.rtol,
                         required_matched_ratio=c.required_matched_ratio, rule=c.rule)


def _case(w):
    return (w.axes["S"], w.axes["B"], w.axes["D"], w.params["masked"], w.params["distribution"])


# ---- reference -------------------------------------------------------------------------------------

def _layer_norm64(v, weight, bias):
    n = v.shape[-1]
    mean = v.sum(-1, keepdim=True) / n
    var = ((v - mean) * (v - mean)).sum(-1, keepdim=True) / n
    return (v - mean) / (var + 1e-5).sqrt() * weight.double() + bias.double()


def _trimul_float64_loops(inp):
    """TriMul in float64 on the CPU, with the contraction as explicit loops over (b, i, j)."""
    inp = {k: v.cpu() for k, v in inp.items()}
    x = inp["x"].double()
    z = _layer_norm64(x, inp["norm_weight"], inp["norm_bias"])
    m = inp["mask"].double()[..., None]

    def lin(name):
        return torch.einsum("bijd,hd->bijh", z, inp[name].double())

    left = lin("left_proj_weight") * m * (1.0 / (1.0 + torch.exp(-lin("left_gate_weight"))))
    right = lin("right_proj_weight") * m * (1.0 / (1.0 + torch.exp(-lin("right_gate_weight"))))
    gate = 1.0 / (1.0 + torch.exp(-lin("out_gate_weight")))
    b_, s = x.shape[0], x.shape[1]
    t = torch.zeros(b_, s, s, left.shape[-1], dtype=torch.float64)
    for b in range(b_):
        for i in range(s):
            for j in range(s):
                t[b, i, j] = (left[b, i] * right[b, j]).sum(0)          # sum over k, per h
    y = _layer_norm64(t, inp["to_out_norm_weight"], inp["to_out_norm_bias"]) * gate
    return torch.einsum("bijh,dh->bijd", y, inp["to_out_weight"].double())


def test_reference_matches_float64_loops(tiny):
    for w, inp, ref in tiny:
        exact = _trimul_float64_loops(inp)
        assert ref.dtype == torch.float32 and ref.shape == inp["x"].shape
        torch.testing.assert_close(ref.cpu().double(), exact, rtol=1e-4, atol=1e-4, msg=w.name)
        assert 0.1 < float(ref.abs().mean()) < 10.0                       # sane magnitudes


def test_reference_restores_the_tf32_setting(task, tiny):
    _, inp, _ = tiny[0]
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        for flag in (True, False):
            torch.backends.cuda.matmul.allow_tf32 = flag
            task.reference(**inp)
            assert torch.backends.cuda.matmul.allow_tf32 is flag
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


# ---- workloads ---------------------------------------------------------------------------------------

def test_workload_sets(task):
    sets = task.workload_sets()
    assert set(sets) == {"tiny", "test", "benchmark", "feedback", "validate", "full"}
    assert [_case(w) for w in sets["benchmark"]] == BENCHMARK
    assert [w.name for w in sets["feedback"]] == [w.name for w in sets["benchmark"]][2:5]
    gate = [_case(w) for w in sets["validate"]]          # the held-out gate: a subset of test with its axes
    assert set(gate) < {_case(w) for w in sets["test"]} and len(gate) <= 2 * len(sets["benchmark"])
    assert {c[2] for c in gate} == {128, 384, 768} and {c[4] for c in gate} == {"normal", "cauchy"}
    assert {c[3] for c in gate} == {True, False} and {c[1] for c in gate} == {1, 2}
    assert any(c[0] % 64 for c in gate) and max(c[0] for c in gate) == 1024
    assert [w.name for w in sets["full"]] == [w.name for w in sets["test"] + sets["benchmark"]]
    test = sets["test"]
    assert len(test) == 18 and len({w.name for w in sets["full"]}) == 25
    assert not {_case(w) for w in test} & set(BENCHMARK)                 # held out from the feedback
    for d in (128, 384, 768):
        of_d = [_case(w) for w in test if w.axes["D"] == d]
        assert {c[3] for c in of_d} == {True, False} and {c[4] for c in of_d} == {"normal", "cauchy"}
    assert {w.axes["B"] for w in test} == {1, 2} and max(w.axes["S"] for w in test) == 1024
    tiny = [_case(w) for w in sets["tiny"]]
    assert {c[0] for c in tiny} == {8, 16, 33} and {c[2] for c in tiny} <= {16, 32}
    assert {c[3] for c in tiny} == {True, False} and "cauchy" in {c[4] for c in tiny}
    assert task.default_workload_set(on_gpu=False) == "tiny" and task.default_workload_set(on_gpu=True) == "feedback"


def test_regions_split_by_sequence_length(task):
    """One region per feedback case (S = 256, 512, 1024), read from S alone; the tiny set is one region."""
    from ksearch.task.regions import region_of, scheme_of

    assert scheme_of(task).axes_used() == ["S"]
    assert [region_of(task, w) for w in task.workload_set("feedback")] == ["S0-256", "S256-512", "S>512"]
    assert {region_of(task, w) for w in task.workload_set("tiny")} == {"S0-256"}
    assert {region_of(task, w) for w in task.workload_set("benchmark")} == {"S0-256", "S256-512", "S>512"}


def test_make_inputs_are_deterministic_and_follow_the_definition(task):
    masked, plain = task.workload_set("tiny")[0], task.workload_set("tiny")[1]
    a = task.make_inputs(masked, device="cpu", seed=7)
    b = task.make_inputs(masked, device="cpu", seed=7)
    c = task.make_inputs(masked, device="cpu", seed=8)
    assert list(a) == task.definition.input_names
    assert all(torch.equal(a[k], b[k]) for k in a) and not torch.equal(a["x"], c["x"])
    assert set(a["mask"].unique().tolist()) == {0.0, 1.0}
    assert bool((task.make_inputs(plain, device="cpu", seed=7)["mask"] == 1).all())
    b_, s, d = masked.axes["B"], masked.axes["S"], masked.axes["D"]
    assert a["x"].shape == (b_, s, s, d) and a["left_proj_weight"].shape == (128, d) and a["to_out_weight"].shape == (d, 128)
    assert all(v.dtype == torch.float32 for v in a.values())
    cauchy = task.workload_set("tiny")[2]
    assert cauchy.params["distribution"] == "cauchy"
    assert float(task.make_inputs(cauchy, device="cpu", seed=0)["x"].abs().max()) > 50   # heavy tails


def test_flops_and_traffic(task):
    w = task.workload_set("benchmark")[6]                                  # S=1024, B=1, D=384
    assert task.flops(w) == 2 * 1024 ** 3 * 128 + 2 * 1024 ** 2 * 384 * 128 * 6
    assert task.traffic_bytes(w) > 2 * 4 * 1024 ** 2 * 384


# ---- the allclose rule -----------------------------------------------------------------------------

def test_allclose_rule_is_atol_plus_rtol_times_ref():
    y = torch.tensor([1.0, 0.0, -10.0])
    inside = torch.tensor([1.039, 0.0199, -10.219])       # 0.039 <= 0.04; 0.0199 <= 0.02; 0.219 <= 0.22
    kw = dict(atol=0.02, rtol=0.02)
    assert check_outputs([inside], [y], ["out"], rule="allclose", **kw).passed
    # FlashInfer-Bench's rule (abs > atol AND rel > rtol fails) refuses the first element.
    assert not check_outputs([inside], [y], ["out"], **kw).passed
    outside = torch.tensor([1.041, 0.0, -10.0])
    res = check_outputs([outside], [y], ["out"], rule="allclose", **kw)
    assert res.status == "INCORRECT_NUMERICAL" and "rtol=0.02 * |ref|" in res.message
    with pytest.raises(ValueError):
        check_outputs([inside], [y], ["out"], rule="closeish", **kw)
    with pytest.raises(ValueError):
        Correctness(rule="closeish")


def test_task_uses_gpumode_correctness(task):
    c = task.correctness
    assert (c.atol, c.rtol, c.required_matched_ratio, c.rule) == (0.02, 0.02, 1.0, "allclose")


# ---- baselines -------------------------------------------------------------------------------------

def test_fp16_baseline_passes_on_tiny(task, tiny):
    factory = task.baselines()["torch_fp16"]
    for w, inp, ref in tiny:
        result = _rule(task, factory(inp)(), ref)
        assert result.passed, (w.name, result.message)


# ---- catalog ---------------------------------------------------------------------------------------

def _catalog(task):
    return load_catalog(task.strategies_dir, task.name)


def _tactics():
    cat = _catalog(load_task(TASK))
    return [(f.name, t.name, dict(t.settings)) for f in cat.families for t in f.tactics]


def test_catalog_shape(task):
    cat = _catalog(task)
    assert {f.name for f in cat.families} == {"cublas_contraction", "triton_contraction", "gemm_input_pass"}
    for fam in cat.families:
        assert 3 <= len(fam.tactics) <= 6
        for knob in fam.knobs.values():
            for value in knob.values:
                src = cat.render(fam.name, {knob.name: value})
                compile(src, f"{fam.name}:{knob.name}={value}", "exec")
                assert "def run(x, mask, norm_weight, norm_bias, left_proj_weight" in src
                for bad in (".item(", ".tolist(", ".cpu(", "synchronize", "import ksearch", "reference"):
                    assert bad not in src, (fam.name, knob.name, value, bad)


def test_every_family_passes_tiny_through_the_evaluator(task):
    """Defaults of each family, judged by the real evaluator (static checks, worker, fresh inputs)."""
    cat = _catalog(task)
    workloads = task.workload_set("tiny")
    baseline = BaselineTimes("cpu", {"reference": {w.name: 1.0 for w in workloads}}, "fixed 1 ms")
    settings = EvalSettings(device="cpu", timeout_s=600, warmup=0, trials=2, check_trials=2)
    with Evaluator(task, settings) as ev:
        for fam in cat.families:
            report = ev.evaluate(cat.render(fam.name, {}), fam.name, workloads, baseline)
            assert report.passed, (fam.name, report.summary(), report.log[-2000:])


@pytest.mark.parametrize("family,tactic,settings", _tactics(), ids=lambda v: v if isinstance(v, str) else "")
def test_tactics_match_reference_under_interpreter(task, tiny, family, tactic, settings):
    run = load_entry_point(_catalog(task).render(family, settings), name_hint=f"trimul_{family}_{tactic}")
    for w, inp, ref in (tiny[-1],):        # the masked Cauchy case with a ragged S (the defaults see them all)
        result = _rule(task, run(**inp), ref)
        assert result.passed, (family, tactic, w.name, result.message)


@pytest.mark.parametrize("settings", [{"gemm_block_k": 32, "gemm_block_n": 64},
                                      {"input_mode": "stats_prepass", "gemm_block_n": 256, "gemm_block_k": 32}],
                         ids=["even_k_narrow_n", "stats_even_k_wide_n"])
def test_gemm_input_pass_even_k_and_column_tiles(task, tiny, settings):
    """D = 32 with 32-wide K steps takes the unmasked K loop; 64- and 256-wide column tiles split the
    interleaved (projection, gate) pairs and the padded out-gate tile differently from the default 128."""
    run = load_entry_point(_catalog(task).render("gemm_input_pass", settings), name_hint="trimul_gemm_even_k")
    w, inp, ref = tiny[1]
    assert w.axes["D"] % 32 == 0
    result = _rule(task, run(**inp), ref)
    assert result.passed, (settings, w.name, result.message)


def test_gemm_input_pass_compiles_to_wgmma_for_hopper():
    """benchmarks/trimul_hopper_compile.py in a fresh process (Triton cannot compile for a GPU where it
    interprets): each input mode's GEMM and pre-pass compile for the H200 (sm_90) on this CPU machine, the
    GEMM on wgmma within one multiprocessor's shared memory. Catches what the interpreter lets through."""

    from ksearch import PROJECT_ROOT

    configs = ["", "input_mode=stats_prepass", "input_mode=epilogue_stats", "gemm_block_n=256,precision=bf16",
               "input_mode=ln_in_tile,gemm_block_k=128,gemm_block_m=64,gemm_warps=8",
               "input_mode=resident,gemm_block_m=64,gemm_block_n=64", "gate_layout=h_major,gemm_programs_per_sm=2",
               "input_mode=stationary", "out_programs_per_sm=1"]
    proc = run_compiled([str(PROJECT_ROOT / "benchmarks" / "trimul_hopper_compile.py"),
                         "--no-ptxas", *[a for c in configs for a in ("--knobs", c)]], timeout=600)
    if proc.returncode == 3:
        pytest.skip(proc.stdout[-500:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("wgmma") >= len(configs)
    assert proc.stdout.count("_proj_resident(D=") == 2                  # D = 128 (two halves) and 384 (three)
    assert proc.stdout.count("_proj_stationary(D=128)") == 1            # D = 384 takes the ln_fp16 GEMM
    assert proc.stdout.count("_norm_gate_out_persistent(D=") == 2       # D = 128 and 384


WEIGHT_NAMES = ("left_proj_weight", "right_proj_weight", "left_gate_weight", "right_gate_weight", "out_gate_weight")


def _weights_and_xhat(mod, inp):
    """The module's folded GEMM weights for a case's inputs, and the case's rows normalised in fp32."""
    w, bias, colsum = mod._gemm_weights(inp["norm_weight"], inp["norm_bias"], *(inp[n] for n in WEIGHT_NAMES))
    x = inp["x"].reshape(-1, inp["x"].shape[-1])
    mean = x.mean(-1, keepdim=True)
    return w, bias, colsum, (x - mean) / ((x - mean).pow(2).mean(-1, keepdim=True) + 1e-5).sqrt()


def test_gemm_input_pass_folds_the_layernorm_into_the_weights(task, tiny):
    """The GEMM's weights carry the LayerNorm scale and its bias the shift: xhat . w + bias reproduces the
    five projections of LN(x), in the interleaved (projection, gate) column order."""
    from ksearch.instantiate.loader import load_module_from_source

    mod = load_module_from_source(_catalog(task).render("gemm_input_pass", {"input_mode": "epilogue_stats"}),
                                  name_hint="trimul_gemm_weights")
    _, inp, _ = tiny[1]
    w, bias, colsum, xhat = _weights_and_xhat(mod, inp)
    hidden, dim = inp["left_proj_weight"].shape
    assert w.shape == (dim, 5 * hidden) and w.dtype == torch.bfloat16 and bias.shape == colsum.shape == (5 * hidden,)
    got = xhat @ w.float() + bias
    z = xhat * inp["norm_weight"] + inp["norm_bias"]
    want = {n: z @ inp[n].t() for n in WEIGHT_NAMES}
    tol = {"rtol": 3e-2, "atol": 3e-2}                                     # bf16 weights
    torch.testing.assert_close(got[:, 0:2 * hidden:2], want["left_proj_weight"], **tol)
    torch.testing.assert_close(got[:, 1:2 * hidden:2], want["left_gate_weight"], **tol)
    torch.testing.assert_close(got[:, 2 * hidden:4 * hidden:2], want["right_proj_weight"], **tol)
    torch.testing.assert_close(got[:, 2 * hidden + 1:4 * hidden:2], want["right_gate_weight"], **tol)
    torch.testing.assert_close(got[:, 4 * hidden:], want["out_gate_weight"], **tol)
    torch.testing.assert_close(colsum, w.float().sum(0))
    plain = load_module_from_source(_catalog(task).render("gemm_input_pass", {}), name_hint="trimul_gemm_w16")
    w16, _, no_colsum = plain._gemm_weights(inp["norm_weight"], inp["norm_bias"], *(inp[n] for n in WEIGHT_NAMES))
    assert w16.dtype == torch.float16 and no_colsum is None
    torch.testing.assert_close(w16.float(), w.float(), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("knobs", [{}, {"gate_layout": "h_major"}, {"input_mode": "epilogue_stats"}])
def test_gemm_input_pass_folds_its_weights_in_one_launch_as_the_torch_formula_does(task, tiny, knobs):
    """`_fold_weights` (one launch instead of a dozen host operations) writes the weights the plain torch
    formula gives: each column's weight row times the LayerNorm scale, rounded once; the bias W . shift; under
    h_major the out gate's (zero, gate) pairs with a bias of 1; the column sums of the rounded weights."""
    from ksearch.instantiate.loader import load_module_from_source

    mod = load_module_from_source(_catalog(task).render("gemm_input_pass", knobs), name_hint="trimul_fold")
    _, inp, _ = tiny[1]
    w, bias, colsum = mod._gemm_weights(inp["norm_weight"], inp["norm_bias"], *(inp[n] for n in WEIGHT_NAMES))
    hidden, dim = inp["left_proj_weight"].shape
    pairs = [torch.stack([inp[p], inp[g]], dim=1).view(2 * hidden, dim)
             for p, g in (("left_proj_weight", "left_gate_weight"), ("right_proj_weight", "right_gate_weight"))]
    og = inp["out_gate_weight"]
    hmajor = knobs.get("gate_layout") == "h_major"
    gates = torch.stack([torch.zeros_like(og), og], dim=1).view(2 * hidden, dim) if hmajor else og
    rows = torch.cat([*pairs, gates])
    want_w = (rows * inp["norm_weight"]).t().to(w.dtype)
    want_bias = rows @ inp["norm_bias"]
    if hmajor:
        want_bias[4 * hidden::2] = 1.0
    assert w.shape == want_w.shape and w.is_contiguous()
    assert torch.equal(w, want_w)
    torch.testing.assert_close(bias, want_bias, rtol=1e-5, atol=1e-5)
    if knobs.get("input_mode") == "epilogue_stats":
        torch.testing.assert_close(colsum, want_w.float().sum(0), rtol=1e-5, atol=1e-5)
    else:
        assert colsum is None


def test_gemm_input_pass_ln_in_tile_only_where_a_row_is_one_k_step(task):
    from ksearch.instantiate.loader import load_module_from_source

    mod = load_module_from_source(_catalog(task).render("gemm_input_pass", {"input_mode": "ln_in_tile",
                                                                             "gemm_block_k": 128}),
                                  name_hint="trimul_ln_in_tile")
    assert [mod._effective_mode(d) for d in (32, 128, 384, 768)] == [3, 3, 0, 0]
    assert mod._gemm_stages(3) == 1 and mod._gemm_stages(0) == 2      # 96 vs 64 KiB a stage, 160 KiB budget


@pytest.mark.parametrize("settings", [{"input_mode": "resident", "gemm_block_m": 64, "gemm_block_n": 64},
                                      {"input_mode": "resident", "gemm_block_m": 64, "gemm_block_n": 128,
                                       "resident_max_chunks": 2}],
                         ids=["three_chunks", "two_chunks"])
def test_gemm_input_pass_resident_rows_of_several_chunks(task, settings):
    """input_mode=resident on rows wider than one 128-column chunk: D = 384 (three full chunks), 200 and 300
    (a ragged last chunk), 768 (past the chunk bound: the ln_fp16 path); masked and Cauchy rows included.
    Rows of at most 128 columns are two halves; one 16-column chunk takes the ln_fp16 path."""
    from ksearch.instantiate.loader import load_module_from_source
    from ksearch.task import Workload

    mod = load_module_from_source(_catalog(task).render("gemm_input_pass", settings), name_hint="trimul_resident")
    bound = settings.get("resident_max_chunks", 3)
    assert [mod._resident_chunks(d) for d in (16, 32, 128, 200, 384)] == [(16, 1), (16, 2), (64, 2), (128, 2),
                                                                         (128, 3)]
    assert mod._effective_mode(16) == 0 and mod._effective_mode(32) == 4         # one chunk: the ln_fp16 path
    for s, b, d, masked, dist in [(9, 1, 384, True, "cauchy"), (5, 2, 200, False, "normal"),
                                  (7, 1, 300, True, "cauchy"), (4, 1, 768, False, "normal")]:
        assert mod._effective_mode(d) == (4 if -(-d // 128) <= bound else 0)
        w = Workload(name=f"r{s}_{b}_{d}", axes={"B": b, "S": s, "D": d},
                     params={"masked": masked, "distribution": dist})
        inp = task.make_inputs(w, device=DEVICE, seed=3)
        result = _rule(task, mod.run(**inp), task.reference(**inp))
        assert result.passed, (settings, w.name, result.message)


@pytest.mark.parametrize("settings", [{"gate_layout": "h_major", "gemm_programs_per_sm": 2},
                                      {"gate_layout": "h_major", "gemm_block_n": 64, "gemm_block_k": 32},
                                      {"gate_layout": "h_major", "gemm_block_n": 256, "gemm_programs_per_sm": 1},
                                      {"gemm_programs_per_sm": 1, "gemm_block_n": 64},
                                      {"gate_layout": "h_major", "input_mode": "resident", "gemm_block_m": 64}],
                         ids=["h_major_persistent", "h_major_narrow", "h_major_wide_one_tile_a_side",
                              "row_major_persistent", "h_major_resident"])
def test_gemm_input_pass_gate_layouts_and_persistent_grid(task, tiny, settings):
    """The out gate h-major (tiles of constant-one and gate pairs, one epilogue) at every column tile width
    (4, 2 and 1 tiles a side), and the persistent GEMM grid (4 programs off the GPU, so each walks several
    tiles, the last ones ragged), on every tiny case."""
    run = load_entry_point(_catalog(task).render("gemm_input_pass", settings), name_hint="trimul_gate_layouts")
    for w, inp, ref in tiny:
        result = _rule(task, run(**inp), ref)
        assert result.passed, (settings, w.name, result.message)


def test_gemm_input_pass_h_major_weights_pair_the_out_gate_with_a_constant_one(task, tiny):
    from ksearch.instantiate.loader import load_module_from_source

    mod = load_module_from_source(_catalog(task).render("gemm_input_pass", {"gate_layout": "h_major"}),
                                  name_hint="trimul_h_major_weights")
    _, inp, _ = tiny[1]
    w, bias, _, xhat = _weights_and_xhat(mod, inp)
    hidden, dim = inp["left_proj_weight"].shape
    assert w.shape == (dim, 6 * hidden) and bias.shape == (6 * hidden,)
    assert torch.all(w[:, 4 * hidden::2] == 0) and torch.all(bias[4 * hidden::2] == 1.0)
    z = xhat * inp["norm_weight"] + inp["norm_bias"]
    torch.testing.assert_close((xhat @ w.float() + bias)[:, 4 * hidden + 1::2], z @ inp["out_gate_weight"].t(),
                               rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("settings", [{"input_mode": "stationary"},
                                      {"input_mode": "stationary", "stationary_block_m": 128, "gemm_block_n": 64}],
                         ids=["staged_x", "unstaged_with_narrow_fallback_tiles"])
def test_gemm_input_pass_stationary_weights(task, settings):
    """input_mode=stationary: a persistent grid (4 programs off the GPU, so each walks several row blocks, the
    last ragged) holding the whole weight matrix, for rows of at most 128 columns (D = 16, 100 padded, 128;
    masked and Cauchy rows); D = 200 and gate_layout=h_major take the ln_fp16 path (at the gemm_* tiles).
    The staged x block only where its fp32 block fits beside the weights (64-row blocks)."""
    from ksearch.instantiate.loader import load_module_from_source
    from ksearch.task import Workload

    mod = load_module_from_source(_catalog(task).render("gemm_input_pass", settings), name_hint="trimul_stationary")
    assert [mod._effective_mode(d) for d in (16, 100, 128, 200, 384)] == [5, 5, 5, 0, 0]
    assert mod._gemm_stages(5, 128) == (2 if mod.STATIONARY_BLOCK_M == 64 else 1)
    assert mod._stationary_smem(128, mod._gemm_stages(5, 128)) <= mod.STATIONARY_SMEM
    for s, b, d, masked, dist in [(9, 1, 128, True, "cauchy"), (5, 2, 16, False, "normal"),
                                  (7, 1, 100, True, "normal"), (3, 1, 200, False, "cauchy")]:
        w = Workload(name=f"st{s}_{b}_{d}", axes={"B": b, "S": s, "D": d},
                     params={"masked": masked, "distribution": dist})
        inp = task.make_inputs(w, device=DEVICE, seed=4)
        result = _rule(task, mod.run(**inp), task.reference(**inp))
        assert result.passed, (settings, w.name, result.message)
    hmajor = load_module_from_source(_catalog(task).render("gemm_input_pass", {**settings, "gate_layout": "h_major"}),
                                     name_hint="trimul_stationary_hmajor")
    assert hmajor._effective_mode(128) == 0


@pytest.mark.parametrize("settings", [{"out_programs_per_sm": 2}, {"out_programs_per_sm": 1, "out_block_d": 128,
                                                                     "gate_layout": "h_major"}],
                         ids=["row_major_gate", "h_major_gate"])
def test_gemm_input_pass_persistent_output_pass(task, settings):
    """out_programs_per_sm > 0: the output pass as a persistent grid holding to_out (4 programs off the GPU,
    each walking several position blocks of both batches, the last ragged) where D fits its shared-memory
    bound (D = 16, 100, 384); D = 768 takes the per-block pass."""
    from ksearch.instantiate.loader import load_module_from_source
    from ksearch.task import Workload

    mod = load_module_from_source(_catalog(task).render("gemm_input_pass", settings), name_hint="trimul_out_persistent")
    launches = []
    persistent = mod._norm_gate_out_persistent

    class Spy:
        def __getitem__(self, grid):
            launches.append(grid)
            return persistent[grid]

    mod._norm_gate_out_persistent = Spy()
    for s, b, d, masked, dist in [(9, 2, 100, True, "cauchy"), (5, 2, 16, False, "normal"),
                                  (3, 1, 384, False, "normal"), (3, 1, 768, True, "normal")]:
        w = Workload(name=f"o{s}_{b}_{d}", axes={"B": b, "S": s, "D": d}, params={"masked": masked, "distribution": dist})
        inp = task.make_inputs(w, device=DEVICE, seed=6)
        before = len(launches)
        result = _rule(task, mod.run(**inp), task.reference(**inp))
        assert result.passed, (settings, w.name, result.message)
        assert len(launches) - before == (0 if d == 768 else 1), (w.name, launches)


def test_gemm_input_pass_resident_row_statistics_survive_extreme_chunks(task):
    """The resident rows' statistics combine chunk by chunk: a row whose first chunk is constant and whose
    second holds values near 1e6 (fp16 overflows at 65504) normalises as the reference does, and so does a
    row that is constant throughout (zero variance: only the LayerNorm's eps)."""
    from ksearch.instantiate.loader import load_module_from_source
    from ksearch.task import Workload

    mod = load_module_from_source(_catalog(task).render("gemm_input_pass", {"input_mode": "resident",
                                                                            "gemm_block_m": 64}),
                                  name_hint="trimul_resident_extreme")
    w = Workload(name="r_extreme", axes={"B": 1, "S": 4, "D": 256}, params={"masked": False, "distribution": "normal"})
    inp = task.make_inputs(w, device=DEVICE, seed=5)
    x = inp["x"].view(-1, 256)
    x[0, :128] = 5.0
    x[0, 128:] = 1e6 * torch.randn(128, device=DEVICE)
    x[1] = -3.25
    x[2, 128:] += 4e4
    result = _rule(task, mod.run(**inp), task.reference(**inp))
    assert result.passed, result.message


def test_dispatch_by_sequence_length_composes_trimul_families(task, tiny):
    """A shape dispatch over two families (the search composes one per S region) runs on every tiny case:
    the members' same-named kernels and helpers are namespaced apart, S is read from x's shape."""
    from ksearch.instantiate.dispatch import Member, axis_sources, compose
    from ksearch.task.regions import scheme_of

    cat = _catalog(task)
    members = [Member("a", cat.render("gemm_input_pass", {"gemm_block_n": 64})),
                Member("b", cat.render("cublas_contraction", {}))]
    source = compose(members, {(0,): "a"}, "b", scheme_of(task), task.definition.input_names,
                     axis_sources(task.definition), TASK)
    run = load_entry_point(source, name_hint="trimul_dispatch")
    for w, inp, ref in tiny:
        result = _rule(task, run(**inp), ref)
        assert result.passed, (w.name, result.message)


# ---- GPUMode timing --------------------------------------------------------------------------------

def test_mean_errors_and_geomean():
    mean, std, err = mean_and_errors([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and std == pytest.approx(math.sqrt(5 / 3)) and err == pytest.approx(std / 2)
    assert geometric_mean([1.0, 4.0, 16.0]) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        geometric_mean([1.0, 0.0])


def test_time_case_regenerates_checks_and_stops():
    seeds, checked = [], []

    def make_inputs(seed):
        seeds.append(seed)
        return {"v": torch.full((4,), float(seed))}

    def check(inputs, out):
        checked.append(float(out[0]))
        return None if torch.equal(out, inputs["v"] * 2) else "wrong"

    timing = time_case("c", lambda inp: (lambda: inp["v"] * 2), make_inputs, check, seed=5, device="cpu",
                       max_repeats=4, rel_stderr=0.0)
    assert timing.runs == 4 and seeds == [5, 18, 31, 44, 57] and checked == [10.0, 36.0, 62.0, 88.0, 114.0]
    assert timing.mean_ms > 0 and timing.stderr_ms >= 0
    with pytest.raises(CheckFailed):
        time_case("c", lambda inp: (lambda: inp["v"]), make_inputs, check, seed=5, device="cpu", max_repeats=2)
    fixed = time_case("c", lambda inp: (lambda: inp["v"] * 2), make_inputs, check, seed=1, device="cpu",
                      max_repeats=50, rel_stderr=1e9)
    assert fixed.runs == 3                                                 # stops at the first chance


def test_gpumode_script_smoke_on_tiny(tmp_path):
    import importlib.util

    from ksearch import PROJECT_ROOT

    spec = importlib.util.spec_from_file_location("trimul_gpumode", PROJECT_ROOT / "benchmarks" / "trimul_gpumode.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "r.json"
    code = mod.main(["--device", DEVICE, "--cases", "tiny", "--family", "cublas_contraction:precision=bf16",
                     "--no-baselines", "--no-recheck", "--max-repeats", "3", "--json", str(out)])
    assert code == 0
    res = json.loads(out.read_text())["results"]["cublas_contraction:precision=bf16"]
    assert res["failed"] is None and res["geomean_ms"] > 0 and len(res["cases"]) == 3
    assert mod.main(["--device", DEVICE, "--cases", "nope", "--no-baselines", "--family", "x"]) == 2


# ---- GPU -------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("family,knobs", [("cublas_contraction", {}), ("triton_contraction", {}),
                                          ("cublas_contraction", {"precision": "bf16"}),
                                          ("triton_contraction", {"precision": "bf16"}),
                                          ("gemm_input_pass", {}),
                                          ("gemm_input_pass", {"input_mode": "stats_prepass"}),
                                          ("gemm_input_pass", {"input_mode": "epilogue_stats"}),
                                          ("gemm_input_pass", {"input_mode": "epilogue_stats", "precision": "bf16"}),
                                          ("gemm_input_pass", {"input_mode": "ln_in_tile", "gemm_block_k": 128,
                                                               "gemm_block_m": 64, "gemm_warps": 8}),
                                          ("gemm_input_pass", {"gemm_block_m": 256, "gemm_warps": 16})])
def test_families_pass_full_set_on_gpu(task, family, knobs):
    run = load_entry_point(_catalog(task).render(family, knobs), name_hint=f"trimul_gpu_{family}")
    for w in task.workload_set("full"):
        inp = task.make_inputs(w, device="cuda", seed=w.input_seed(0))
        result = _rule(task, run(**inp), task.reference(**inp))
        assert result.passed, (family, knobs, w.name, result.message)
        del inp
        torch.cuda.empty_cache()


@pytest.mark.gpu
@pytest.mark.parametrize("name,set_name", [("torch_fp16", "full"), ("torch_compile", "benchmark")])
def test_baselines_pass_on_gpu(task, name, set_name):
    factory = task.baselines()[name]
    for w in task.workload_set(set_name):
        inp = task.make_inputs(w, device="cuda", seed=w.input_seed(0))
        result = _rule(task, factory(inp)(), task.reference(**inp))
        assert result.passed, (name, w.name, result.message)
        del inp
        torch.cuda.empty_cache()


# ---- the search end to end -------------------------------------------------------------------------

@pytest.mark.slow
def test_ksearch_run_passes_on_tiny(tmp_path):
    """`ksearch run task=trimul_outgoing_h128 search.max_rounds=4` on the CPU tiny set (about 3 minutes)."""

    run_dir = tmp_path / "run"
    proc = run_compiled(["-m", "ksearch.cli.main", "run", f"task={TASK}", f"run.dir={run_dir}",
                         "search.max_rounds=4", "run.live=false", "eval.device=cpu"], timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    from ksearch.store import read_records
    from ksearch.store import records as R

    assert len(R.of_kind(read_records(run_dir / "journal.jsonl")[0], R.Evaluation)) == 4
    assert (run_dir / "best" / "solution.py").exists()
    assert "best:" in proc.stdout and "vs PyTorch reference (CPU)" in proc.stdout


def test_sweep_script_smoke(tmp_path):
    """benchmarks/trimul_sweep.py --smoke: two subjects on two tiny cases under the interpreter, the JSON and
    the held-out check included (what the H200 run does, minus the GPU)."""
    import importlib.util

    from ksearch import PROJECT_ROOT

    spec = importlib.util.spec_from_file_location("trimul_sweep", PROJECT_ROOT / "benchmarks" / "trimul_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main([str(tmp_path), "--smoke", "--only", "cublas_defaults,gemm_defaults"]) == 0
    doc = json.loads((tmp_path / "trimul_sweep.json").read_text())
    for label in ("cublas_defaults", "gemm_defaults"):
        res = doc["subjects"][label]
        assert res["failed"] is None and res["geomean_ms"] > 0 and len(res["cases"]) == 2
        assert res["input_pass"]["project_ms"] > 0 and doc["test_set_failures"][label] == []
        assert set(res["project_cases"]) == set(res["cases"]) and min(res["project_cases"].values()) > 0
    assert doc["subjects"]["gemm_defaults"]["input_pass"]["prepass_ms"] > 0
    assert mod.main([str(tmp_path), "--smoke", "--only", "nope"]) == 2
    traffic, flops = mod.input_pass_work(1, 1024, 384)
    assert traffic == 1024 ** 2 * (4 * 384 + 4 + 6 * 128) and flops == 2 * 1024 ** 2 * 384 * 640
    assert mod.limit_ms(4_200_000_000, 0, 4.2, 790.0) == (1.0, "memory")


def test_pick_default_takes_only_a_checked_winner_and_sets_it_in_the_catalog(tmp_path, capsys):
    """benchmarks/trimul_pick_default.py: a gemm_input_pass subject that beats gemm_defaults by the margin in the
    same sweep and passed the test set becomes the family's defaults (the catalog's other families, comments
    and anchors untouched); a near tie, a test-set failure or an unchecked winner does not; a knob shared
    through an anchor is refused rather than set for every family."""
    import importlib.util
    import shutil

    from ksearch import PROJECT_ROOT
    from ksearch.task.catalog import load_catalog

    spec = importlib.util.spec_from_file_location("trimul_pick_default",
                                                  PROJECT_ROOT / "benchmarks" / "trimul_pick_default.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def sweep(st_ms, fails, knobs=None):
        return {"subjects": {"cublas_defaults": {"family": "cublas_contraction", "knobs": {}, "geomean_ms": 0.9},
                             "gemm_defaults": {"family": "gemm_input_pass", "knobs": {}, "geomean_ms": 1.2},
                             "st": {"family": "gemm_input_pass", "geomean_ms": st_ms,
                                    "knobs": knobs or {"input_mode": "stationary", "out_programs_per_sm": 2}},
                             "broken": {"family": "gemm_input_pass", "knobs": {}, "geomean_ms": None}},
                "test_set_failures": fails}

    assert mod.pick(sweep(1.0, {"st": []}), 1.03)[0] == {"input_mode": "stationary", "out_programs_per_sm": 2}
    assert mod.pick(sweep(1.19, {"st": []}), 1.03)[0] is None                  # within the margin
    assert mod.pick(sweep(1.0, {"st": ["case: wrong"]}), 1.03)[0] is None
    assert mod.pick(sweep(1.0, {}), 1.03)[0] is None                          # never checked on the test set
    strategies = tmp_path / "strategies"
    shutil.copytree(PROJECT_ROOT / "tasks" / TASK / "strategies", strategies)
    before = {f.name: f.defaults() for f in load_catalog(strategies, TASK).families}
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(sweep(1.0, {"st": []})))
    assert mod.main([str(path), "--apply", "--strategies", str(strategies)]) == 0
    assert json.loads(capsys.readouterr().out) == {"input_mode": "stationary", "out_programs_per_sm": 2}
    after = {f.name: f.defaults() for f in load_catalog(strategies, TASK).families}
    assert after["gemm_input_pass"] == {**before["gemm_input_pass"], "input_mode": "stationary",
                                        "out_programs_per_sm": 2}
    assert {k: v for k, v in after.items() if k != "gemm_input_pass"} == \
        {k: v for k, v in before.items() if k != "gemm_input_pass"}
    path.write_text(json.dumps(sweep(1.0, {"st": []}, {"out_block_p": 32})))
    assert mod.main([str(path), "--apply", "--strategies", str(strategies)]) == 2
    assert "anchor" in capsys.readouterr().err
    assert {f.name: f.defaults() for f in load_catalog(strategies, TASK).families} == after     # nothing written
    path.write_text("not json")
    assert mod.main([str(path)]) == 2
    assert mod.main([]) == 2 and mod.main(["--set", "[1]"]) == 2
    assert mod.main(["--set", '{"stationary_block_m": 128}', "--strategies", str(strategies)]) == 0
    assert load_catalog(strategies, TASK).family("gemm_input_pass").defaults()["stationary_block_m"] == 128
