"""The two MLA tasks: references against float64 loops, every Triton catalog family (defaults and tactics)
under the Triton interpreter on the tiny workloads, a few edge inputs, and the workload sets' index layouts.
CUDA families (GPU only) are checked here as sources; tests/test_prefill_cuda_kernel.py runs them."""

from ksearch.eval.interpreter import prepare_interpreter

prepare_interpreter()  # before anything imports a Triton kernel

import inspect
import math
import re

import pytest
import torch

from ksearch.eval.trusted.rules import check_outputs
from ksearch.instantiate.cuda import check_source
from ksearch.instantiate.language import CUDA, language_of
from ksearch.instantiate.loader import load_entry_point
from ksearch.task import load_task
from ksearch.task.catalog import load_catalog
from ksearch.task.paged import paged_indices
from tests.compiled_process import run_compiled, skip_without_ptxas

DECODE = "mla_paged_decode_h16_ckv512_kpe64_ps1"
PREFILL = "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1"
SM_SCALE = 0.1352337747812271
POOL_PAGES = 989_669
TOL = dict(atol=1e-2, rtol=1e-2)

_tasks = {name: load_task(name) for name in (DECODE, PREFILL)}
_catalogs = {name: load_catalog(t.strategies_dir, name) for name, t in _tasks.items()}
#: The families the Triton interpreter runs (a CUDA family needs a GPU).
_cpu_families = {name: cat.runnable_families("cpu") for name, cat in _catalogs.items()}




# ----------------------------------------------------------------------------- helpers

def _rand_inputs(num_tokens, num_pages, seed):
    gen = torch.Generator().manual_seed(seed)
    bf16 = torch.bfloat16
    return {
        "q_nope": torch.randn(num_tokens, 16, 512, generator=gen).to(bf16),
        "q_pe": torch.randn(num_tokens, 16, 64, generator=gen).to(bf16),
        "ckv_cache": torch.randn(num_pages, 1, 512, generator=gen).to(bf16),
        "kpe_cache": torch.randn(num_pages, 1, 64, generator=gen).to(bf16),
    }


def _decode_inputs(kv_lens, num_pages, seed=3):
    base = _rand_inputs(len(kv_lens), num_pages, seed)
    indptr, indices = paged_indices(kv_lens, num_pages, torch.Generator().manual_seed(seed))
    return {**base, "kv_indptr": indptr, "kv_indices": indices, "sm_scale": SM_SCALE}


def _prefill_inputs(q_lens, kv_lens, num_pages, extra_rows=0, seed=5):
    total_q = sum(q_lens) + extra_rows
    base = _rand_inputs(total_q, num_pages, seed)
    qo = torch.zeros(len(q_lens) + 1, dtype=torch.int32)
    qo[1:] = torch.cumsum(torch.tensor(q_lens), 0).to(torch.int32)
    indptr, indices = paged_indices(kv_lens, num_pages, torch.Generator().manual_seed(seed))
    return {"q_nope": base["q_nope"], "q_pe": base["q_pe"], "ckv_cache": base["ckv_cache"],
            "kpe_cache": base["kpe_cache"], "qo_indptr": qo, "kv_indptr": indptr, "kv_indices": indices,
            "sm_scale": SM_SCALE}


def _attend64(qn, qp, rows, ckv, kpe, scale):
    """One query's 16 heads over the given cache rows, in float64: (output [16, 512], base-2 lse [16])."""
    if len(rows) == 0:
        return torch.zeros(16, 512, dtype=torch.float64), torch.full((16,), -math.inf, dtype=torch.float64)
    keys = ckv[rows, 0].double()
    logits = scale * (qn.double() @ keys.T + qp.double() @ kpe[rows, 0].double().T)   # [16, L]
    lse = torch.logsumexp(logits, dim=-1)
    return torch.softmax(logits, dim=-1) @ keys, lse / math.log(2.0)


def _decode64(inp):
    ptr, idx = inp["kv_indptr"].tolist(), inp["kv_indices"].long()
    outs, lses = [], []
    for b in range(len(ptr) - 1):
        o, lse = _attend64(inp["q_nope"][b], inp["q_pe"][b], idx[ptr[b]:ptr[b + 1]], inp["ckv_cache"],
                           inp["kpe_cache"], inp["sm_scale"])
        outs.append(o)
        lses.append(lse)
    return torch.stack(outs), torch.stack(lses)


def _prefill64(inp):
    total_q = inp["q_nope"].shape[0]
    qo, kv, idx = inp["qo_indptr"].tolist(), inp["kv_indptr"].tolist(), inp["kv_indices"].long()
    out = torch.zeros(total_q, 16, 512, dtype=torch.float64)
    lse = torch.full((total_q, 16), -math.inf, dtype=torch.float64)
    for b in range(len(qo) - 1):
        q_len, kv_len = qo[b + 1] - qo[b], kv[b + 1] - kv[b]
        for i in range(q_len):
            t = qo[b] + i
            rows = idx[kv[b]:kv[b] + kv_len - q_len + i + 1]        # causal, bottom-right aligned
            out[t], lse[t] = _attend64(inp["q_nope"][t], inp["q_pe"][t], rows, inp["ckv_cache"],
                                       inp["kpe_cache"], inp["sm_scale"])
    return out, lse


def _assert_close_to_f64(got, want64):
    out, lse = got
    want_out, want_lse = want64
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    # bf16 rounding of the output is the only expected difference.
    torch.testing.assert_close(out.double(), want_out, atol=1e-3, rtol=2 ** -8)
    finite = torch.isfinite(want_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert torch.all(torch.isneginf(lse[~finite]))
    torch.testing.assert_close(lse.double()[finite], want_lse[finite], atol=1e-4, rtol=1e-5)


# ----------------------------------------------------------------------------- (a) references

def test_decode_reference_matches_float64_loop():
    # Uneven batch, one empty sequence (output 0, lse -inf), one single-token sequence.
    inp = _decode_inputs([37, 0, 1, 120, 9], num_pages=300)
    got = _tasks[DECODE].reference(**inp)
    _assert_close_to_f64(got, _decode64(inp))
    assert torch.all(got[0][1] == 0) and torch.all(torch.isneginf(got[1][1]))


def test_prefill_reference_matches_float64_loop():
    # q_len == kv_len, q_len < kv_len, a sequence with no queries, and 3 trailing uncovered rows.
    inp = _prefill_inputs([4, 1, 0, 7, 12], [4, 30, 5, 9, 50], num_pages=200, extra_rows=3)
    got = _tasks[PREFILL].reference(**inp)
    _assert_close_to_f64(got, _prefill64(inp))
    assert torch.all(got[0][-3:] == 0) and torch.all(torch.isneginf(got[1][-3:]))


def test_prefill_reference_query_chunks_match_float64_loop(monkeypatch):
    # A tiny chunk budget makes the reference walk its queries 2 at a time (the module's budget: `run` is
    # wrapped by torch.no_grad, whose own globals are not the module's).
    inp = _prefill_inputs([13, 1, 9], [40, 25, 9], num_pages=120, seed=11)
    ref = _tasks[PREFILL].reference
    per_query = 3 * 16 * (40 + 512 + 64 + 512) * 4
    monkeypatch.setitem(inspect.unwrap(ref).__globals__, "CHUNK_BYTES", 2 * per_query)
    _assert_close_to_f64(ref(**inp), _prefill64(inp))


def _count_logits(monkeypatch) -> list[int]:
    """The element counts of every q.k product ([.., C, Lk] logits) torch.einsum computes from now on."""
    logits: list[int] = []
    einsum = torch.einsum

    def counting(eq, *ops):
        out = einsum(eq, *ops)
        if eq.endswith("l") and "l" in eq.split(",")[1]:        # the q.k products: [.., C, Lk] logits
            logits.append(out.numel())
        return out

    monkeypatch.setattr(torch, "einsum", counting)
    return logits


def test_prefill_reference_chunks_compute_only_the_keys_their_queries_see(monkeypatch):
    # The judge computes a reference for every input set of every timed window: a chunk of queries leaves out
    # the keys past its last query (half the work of a fresh prefill), and the result is the same.
    inp = _prefill_inputs([12, 5], [12, 30], num_pages=60, seed=5)
    ref = _tasks[PREFILL].reference
    per_query = 16 * (30 + 512 + 64 + 512) * 4
    monkeypatch.setitem(inspect.unwrap(ref).__globals__, "CHUNK_BYTES", 4 * per_query)     # chunks of 4 queries
    logits = _count_logits(monkeypatch)
    got = ref(**inp)
    # sequence 0 (no prefix): chunks [0,4) [4,8) [8,12) see 4, 8, 12 keys; sequence 1 (prefix 25): [0,4) 29, [4,5) 30
    seen = 4 * 4 + 4 * 8 + 4 * 12 + 4 * 29 + 1 * 30
    assert sum(logits) == 2 * 16 * seen
    _assert_close_to_f64(got, _prefill64(inp))


def test_prefill_reference_does_not_pad_a_ragged_batch(monkeypatch):
    # The judge computes the reference for every timed input set: a long chunk beside short sequences must
    # cost its own logits only, not the batch padded to the longest sequence.
    inp = _prefill_inputs([20, 1, 3], [20, 200, 9], num_pages=260)
    logits = _count_logits(monkeypatch)
    got = _tasks[PREFILL].reference(**inp)
    assert sum(logits) == 2 * 16 * (20 * 20 + 1 * 200 + 3 * 9)          # ckv and kpe parts, per sequence
    _assert_close_to_f64(got, _prefill64(inp))


# ----------------------------------------------------------------------------- (b) catalogs

def _cases():
    cases = []
    for task, families in _cpu_families.items():
        short = "decode" if task == DECODE else "prefill"
        for fam in families:
            cases.append(pytest.param(task, fam.name, {}, id=f"{short}-{fam.name}-defaults"))
            for tac in fam.tactics:
                cases.append(pytest.param(task, fam.name, dict(tac.settings), id=f"{short}-{fam.name}-{tac.name}"))
    return cases


def _entry(task, family, knobs, *, gpu=False):
    # A GPU test loads its kernels under a name of its own: a module loaded by a CPU test of the session (the
    # same source, defined under the interpreter) stays in sys.modules and would be handed back otherwise.
    return load_entry_point(_catalogs[task].render(family, knobs), name_hint=f"{family}_gpu" if gpu else family)


def _check(task, got, want):
    names = _tasks[task].definition.output_names
    return check_outputs(list(got), list(want), names, **TOL)


_TINY = {}


def _tiny_cases(task):
    if task not in _TINY:
        t = _tasks[task]
        cases = []
        for w in t.workload_set("tiny"):
            inputs = t.make_inputs(w, device="cpu", seed=0)
            cases.append((w.name, inputs, t.reference(**inputs)))
        _TINY[task] = cases
    return _TINY[task]


def test_catalog_shape():
    expected = {DECODE: {"split_kv_heads_m", "even_split_per_seq"},
                PREFILL: {"flash_tile_heads_m", "per_query_split"}}
    for task, cat in _catalogs.items():
        assert expected[task] <= {f.name for f in cat.families}
        for fam in cat.families:
            assert 3 <= len(fam.tactics) <= 6, fam.name


@pytest.mark.parametrize("task", [DECODE, PREFILL])
def test_rendered_sources_are_clean(task):
    cat = _catalogs[task]
    signature = "def run(" + ", ".join(_tasks[task].definition.input_names) + ")"
    for fam in _cpu_families[task]:
        for knobs in [{}] + [dict(t.settings) for t in fam.tactics]:
            src = cat.render(fam.name, knobs)
            assert language_of(src) == fam.language, fam.name
            compile(src, f"<{fam.name}>", "exec")
            assert signature in src, f"{fam.name}: entry point must be `{signature}`"
            for bad in (".item(", ".tolist(", ".cuda(", ".cpu(", "synchronize"):
                assert bad not in src, f"{fam.name} {knobs}: {bad} in the hot path"
            assert not re.search(r"\b0[xX][0-9a-fA-F.]*[pP]", src), "hex float literal"


@pytest.mark.parametrize("task", [DECODE, PREFILL])
def test_rendered_cuda_sources_bind(task):
    """A CUDA family at its defaults and every tactic: a CUDA source whose host `run` takes the definition's
    inputs in order (what the generated binding calls) and never waits for the GPU on the host."""
    cat = _catalogs[task]
    for fam in (f for f in cat.families if f.language == CUDA):
        for knobs in [{}] + [dict(t.settings) for t in fam.tactics]:
            src = cat.render(fam.name, knobs)
            assert language_of(src) == CUDA, fam.name
            sig = check_source(src)
            assert sig is not None, f"{fam.name}: ksearch generates the binding; the source must not bind `run`"
            names = [re.findall(r"\w+", p)[-1] for p in sig.params.split(",")]
            assert names == _tasks[task].definition.input_names, f"{fam.name}: run({sig.params})"
            for bad in (".item(", ".item<", ".cpu(", "Synchronize("):
                assert bad not in src, f"{fam.name} {knobs}: {bad} in the hot path"


@pytest.mark.parametrize("task,family,knobs", _cases())
def test_family_matches_reference(task, family, knobs):
    run = _entry(task, family, knobs)
    for name, inputs, want in _tiny_cases(task):
        res = _check(task, run(**inputs), want)
        assert res.passed, f"{family} {knobs} on {name}: {res.status} {res.message}"


@pytest.mark.parametrize("family", [f.name for f in _cpu_families[DECODE]])
def test_decode_long_chunks_and_empty_sequence(family, monkeypatch):
    # A 1-SM schedule makes chunks/pieces span several BLOCK_N steps; one sequence is empty.
    run = _entry(DECODE, family, {"BLOCK_N": 16})
    monkeypatch.setitem(run.__globals__, "_num_sms", lambda device: 1)
    inputs = _decode_inputs([70, 0, 5, 130], num_pages=260)
    got = run(**inputs)
    res = _check(DECODE, got, _tasks[DECODE].reference(**inputs))
    assert res.passed, f"{family}: {res.status} {res.message}"
    assert torch.all(got[0][1] == 0) and torch.all(torch.isneginf(got[1][1]))


@pytest.mark.parametrize("family", [f.name for f in _cpu_families[PREFILL]])
@pytest.mark.parametrize("knobs", [{}, {"BLOCK_N": 16}], ids=["defaults", "n16"])
def test_prefill_empty_sequence_and_uncovered_rows(family, knobs):
    # A sequence with no queries, q_len == kv_len, q_len < kv_len, and 2 rows past qo_indptr[-1]
    # (with BLOCK_N 16 both families also cut the KV ranges into pieces).
    inputs = _prefill_inputs([3, 0, 6, 1], [3, 4, 40, 20], num_pages=100, extra_rows=2)
    got = _entry(PREFILL, family, knobs)(**inputs)
    res = _check(PREFILL, got, _tasks[PREFILL].reference(**inputs))
    assert res.passed, f"{family} {knobs}: {res.status} {res.message}"
    assert torch.all(got[0][-2:] == 0) and torch.all(torch.isneginf(got[1][-2:]))


# ----------------------------------------------------------------------------- (c) workloads

def _check_indices(kv_lens, num_pages, seed=0):
    indptr, indices = paged_indices(kv_lens, num_pages, torch.Generator().manual_seed(seed))
    assert indptr[0] == 0 and torch.all(indptr[1:] - indptr[:-1] == torch.tensor(kv_lens, dtype=torch.int32))
    assert indices.numel() == sum(kv_lens) == int(indptr[-1])
    assert int(indices.min()) >= 0 and int(indices.max()) < num_pages
    assert torch.unique(indices).numel() == indices.numel()


def test_decode_workload_sets():
    sets = _tasks[DECODE].workload_sets()
    # The dataset's 47 axes and issue 23's four mixes.
    assert len(sets["full"]) == 47 + 4 and len(sets["feedback"]) == 5 and len(sets["tiny"]) >= 2
    fb = [(w.axes["batch_size"], w.axes["num_kv_indices"]) for w in sets["feedback"]]
    assert fb == [(16, 14857), (16, 17257), (1, 2408), (16, 12857), (64, 62345)]
    batches = [w.axes["batch_size"] for w in sets["full"]]
    assert batches.count(1) == 15 and batches.count(16) == 16 and batches.count(64) == 16
    assert {40, 5, 3, 2} <= set(batches)
    totals = {b: sorted(w.axes["num_kv_indices"] for w in sets["full"] if w.axes["batch_size"] == b)
              for b in (16, 64)}
    assert totals[16][0] == 457 and totals[16][-1] == 17257
    assert totals[64][0] == 9945 and totals[64][-1] == 75145
    names = [w.name for n, s in sets.items() if n != "validate" for w in s]    # the gate is a subset of space
    assert len(names) == len(set(names))
    assert {w.name for w in sets["validate"]} < {w.name for w in sets["space"]}
    for name, ws in sets.items():
        for w in ws:
            ax, lens = w.axes, w.params["kv_lens"]
            assert ax["len_indptr"] == ax["batch_size"] + 1 == len(lens) + 1
            cpu_sized = name in ("tiny", "validate_cpu")           # CPU sets hold an empty sequence on purpose
            assert sum(lens) == ax["num_kv_indices"] and min(lens) >= (0 if cpu_sized else 1)
            assert w.params["sm_scale"] == SM_SCALE
            if cpu_sized:
                assert ax["num_pages"] >= sum(lens)
            else:
                assert ax["num_pages"] == POOL_PAGES
            _check_indices(lens, ax["num_pages"])
            assert _tasks[DECODE].traffic_bytes(w) > sum(lens) * 576 * 2


def test_prefill_workload_sets():
    sets = _tasks[PREFILL].workload_sets()
    assert len(sets["full"]) == 38 and len(sets["feedback"]) == 8 and len(sets["tiny"]) >= 2
    assert [w.axes["total_q"] for w in sets["feedback"]] == [33, 1, 17, 52, 376, 287, 5, 1187]
    full = {(w.axes["total_q"], w.axes["len_indptr"] - 1, w.axes["num_kv_indices"]) for w in sets["full"]}
    assert {(1, 1, 34), (22, 22, 17759), (8987, 56, 14390), (16384, 1, 16387)} <= full
    fb = {(w.axes["total_q"], w.axes["len_indptr"] - 1, w.axes["num_kv_indices"]) for w in sets["feedback"]}
    assert fb <= full
    names = [w.name for n, s in sets.items() if n != "validate" for w in s]    # the gate is a subset of space
    assert len(names) == len(set(names))
    assert {w.name for w in sets["validate"]} < {w.name for w in sets["space"]}
    for name, ws in sets.items():
        for w in ws:
            ax, q_lens, kv_lens = w.axes, w.params["q_lens"], w.params["kv_lens"]
            assert ax["len_indptr"] == len(q_lens) + 1 == len(kv_lens) + 1
            assert sum(q_lens) == ax["total_q"] and sum(kv_lens) == ax["num_kv_indices"]
            cpu_sized = name in ("tiny", "validate_cpu")           # CPU sets hold an empty sequence on purpose
            assert all(kv >= q >= (0 if cpu_sized else 1) for q, kv in zip(q_lens, kv_lens))
            assert w.params["sm_scale"] == SM_SCALE
            if cpu_sized:
                assert ax["num_pages"] >= sum(kv_lens)
            else:
                assert ax["num_pages"] == POOL_PAGES
            _check_indices(kv_lens, ax["num_pages"])
            assert _tasks[PREFILL].traffic_bytes(w) > sum(kv_lens) * 576 * 2


@pytest.mark.parametrize("task", [DECODE, PREFILL])
def test_tiny_make_inputs_follow_the_definition(task):
    t = _tasks[task]
    for w in t.workload_set("tiny"):
        inputs = t.make_inputs(w, device="cpu", seed=7)
        for spec in t.definition.inputs:
            if spec.is_scalar:
                assert isinstance(inputs[spec.name], float)
                continue
            x = inputs[spec.name]
            assert x.dtype == spec.torch_dtype, spec.name
            want = spec.concrete_shape({**t.definition.const_axes(), **w.axes})
            assert tuple(x.shape) == want, (spec.name, tuple(x.shape), want)
        if task == PREFILL:
            assert int(inputs["qo_indptr"][-1]) == w.axes["total_q"]
        assert int(inputs["kv_indptr"][-1]) == w.axes["num_kv_indices"]
        again = t.make_inputs(w, device="cpu", seed=7)
        assert all(torch.equal(again[k], v) if isinstance(v, torch.Tensor) else again[k] == v
                   for k, v in inputs.items())


# ----------------------------------------------------------------------------- sm_90a compile

_AOT_SCRIPT = r'''
import json, os, sys
os.environ.pop("TRITON_INTERPRET", None)
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction
from ksearch.instantiate.loader import load_entry_point
from ksearch.task.catalog import load_catalog
from ksearch.task import load_task

launches = []
JITFunction.run = lambda self, *args, grid, warmup, **kw: launches.append((self, args, kw))
PTR = {torch.bfloat16: "*bf16", torch.float32: "*fp32", torch.int32: "*i32"}
task = load_task(sys.argv[1])
cat = load_catalog(task.strategies_dir, task.name)
inputs = task.make_inputs(task.workload_set("tiny")[-1], device="cpu", seed=0)
out = []
for fam in cat.runnable_families("cpu"):     # the Triton families; nvcc builds a CUDA one (test_prefill_cuda_kernel)
    launches.clear()
    load_entry_point(cat.render(fam.name, {}), name_hint="aot_" + fam.name)(**inputs)
    for fn, args, kw in launches:
        sig, consts, attrs = {}, {}, {}
        for i, p in enumerate(fn.params):
            if p.is_constexpr:
                sig[p.name], consts[p.name] = "constexpr", kw[p.name]
                continue
            v = args[i]
            if isinstance(v, torch.Tensor):
                sig[p.name], attrs[(i,)] = PTR[v.dtype], [["tt.divisibility", 16]]
            elif isinstance(v, float):
                sig[p.name] = "fp32"
            else:
                sig[p.name] = "i32"
                if v % 16 == 0 and v:
                    attrs[(i,)] = [["tt.divisibility", 16]]
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                           target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": kw.get("num_warps", 4), "num_stages": kw.get("num_stages", 3)})
        out.append({"family": fam.name, "kernel": fn.__name__, "shared": k.metadata.shared})
print(json.dumps(out))
'''


@pytest.mark.parametrize("task", [DECODE, PREFILL])
def test_family_defaults_compile_for_sm90a(task):
    """The interpreter cannot catch GPU-only failures: compile every kernel of every family (defaults)
    for sm_90a with ptxas, no GPU needed, and check the shared memory fits an H200 block (227 KB)."""
    import json

    proc = run_compiled(["-c", _AOT_SCRIPT, task], timeout=300)
    skip_without_ptxas(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kernels = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {k["family"] for k in kernels} == {f.name for f in _cpu_families[task]}
    for k in kernels:
        assert k["shared"] <= 232448, k


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fused_even_split_on_the_gpu():
    # The tagged-partial handshake (release/acquire across programs) only runs for real on a GPU.
    run = _entry(DECODE, "fused_even_split", {"MAX_SPLITS": 32, "CTAS_PER_SM": 4}, gpu=True)
    t = _tasks[DECODE]
    for w in t.workload_set("feedback"):
        inputs = t.make_inputs(w, device="cuda", seed=3)
        want = t.reference(**inputs)
        for _ in range(10):
            res = _check(DECODE, run(**inputs), want)
            assert res.passed, f"{w.name}: {res.message}"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_persistent_tc_tile_on_the_gpu():
    run = _entry(PREFILL, "persistent_tc_tile", {}, gpu=True)
    t = _tasks[PREFILL]
    for w in t.workload_set("feedback"):
        inputs = t.make_inputs(w, device="cuda", seed=3)
        res = _check(PREFILL, run(**inputs), t.reference(**inputs))
        assert res.passed, f"{w.name}: {res.message}"
