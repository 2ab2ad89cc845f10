"""The strategy catalog of gqa_paged_decode_h32_kv4_d128_ps1: every family at its defaults, at every
tactic and at a few extreme knob combinations, run under the Triton interpreter on the tiny workloads
and compared with the task reference (every element must pass)."""

from ksearch.eval.interpreter import prepare_interpreter

prepare_interpreter()  # before anything imports a Triton kernel

import re

import pytest
import torch

from ksearch.eval.trusted.rules import check_outputs
from ksearch.instantiate.loader import load_entry_point
from ksearch.task import load_task
from ksearch.task.catalog import load_catalog
from ksearch.task.paged import paged_indices

TASK = "gqa_paged_decode_h32_kv4_d128_ps1"
TOL = dict(atol=1e-2, rtol=1e-2)

_task = load_task(TASK)
_catalog = load_catalog(_task.strategies_dir, TASK)

# Cheap corners of the knob space, beyond defaults and tactics.
EXTREMES = {
    "split_kv": [
        {"BLOCK_N": 16, "TARGET_CTAS": 2112, "MIN_SPLIT_TOKENS": 16, "NUM_WARPS": 2, "NUM_STAGES": 1},
        {"BLOCK_N": 128, "TARGET_CTAS": 264, "MIN_SPLIT_TOKENS": 128, "NUM_WARPS": 8, "NUM_STAGES": 4,
         "EVICT_FIRST": True},
        {"USE_DOT": False, "BLOCK_N": 16, "NUM_WARPS": 8, "TARGET_CTAS": 2112, "MIN_SPLIT_TOKENS": 16},
        {"USE_DOT": False, "BLOCK_N": 64, "NUM_WARPS": 2, "NUM_STAGES": 1},
    ],
    "grouped_heads": [
        {"BLOCK_N": 16, "NUM_WARPS": 2, "NUM_STAGES": 1},
        {"BLOCK_N": 128, "NUM_WARPS": 2, "NUM_STAGES": 4, "EVICT_FIRST": True},
    ],
    "fused_split_kv": [
        {"BLOCK_N": 16, "TARGET_CTAS": 528, "MIN_SPLIT_TOKENS": 16, "NUM_WARPS": 2, "NUM_STAGES": 1},
        {"BLOCK_N": 128, "TARGET_CTAS": 132, "MIN_SPLIT_TOKENS": 128, "NUM_WARPS": 8, "NUM_STAGES": 3},
    ],
}


def _cases():
    cases = []
    for fam in _catalog.families:
        cases.append(pytest.param(fam.name, {}, id=f"{fam.name}-defaults"))
        for tac in fam.tactics:
            cases.append(pytest.param(fam.name, dict(tac.settings), id=f"{fam.name}-{tac.name}"))
        for i, knobs in enumerate(EXTREMES.get(fam.name, [])):
            cases.append(pytest.param(fam.name, knobs, id=f"{fam.name}-extreme{i}"))
    return cases


def _entry(family, knobs, *, gpu=False):
    # A GPU test loads its kernels under a name of its own: a module loaded by a CPU test of the session (the
    # same source, defined under the interpreter) stays in sys.modules and would be handed back otherwise.
    return load_entry_point(_catalog.render(family, knobs), name_hint=f"{family}_gpu" if gpu else family)


def _check(got, want):
    names = _task.definition.output_names
    return check_outputs(list(got), list(want), names, **TOL)


@pytest.fixture(scope="module")
def tiny_cases():
    out = []
    for w in _task.workload_set("tiny"):
        inputs = _task.make_inputs(w, device="cpu", seed=0)
        out.append((w.name, inputs, _task.reference(**inputs)))
    return out


def _edge_inputs(kv_lens, num_pages, seed=1):
    gen = torch.Generator().manual_seed(seed)
    batch = len(kv_lens)
    indptr, indices = paged_indices(kv_lens, num_pages, torch.Generator().manual_seed(seed))
    return {
        "q": torch.randn(batch, 32, 128, generator=gen).to(torch.bfloat16),
        "k_cache": torch.randn(num_pages, 1, 4, 128, generator=gen).to(torch.bfloat16),
        "v_cache": torch.randn(num_pages, 1, 4, 128, generator=gen).to(torch.bfloat16),
        "kv_indptr": indptr, "kv_indices": indices, "sm_scale": 1.0 / 128 ** 0.5,
    }


def test_catalog_shape():
    names = [f.name for f in _catalog.families]
    assert {"split_kv", "grouped_heads"} <= set(names)
    for fam in _catalog.families:
        assert 3 <= len(fam.tactics) <= 6, fam.name
        for knobs in EXTREMES.get(fam.name, []):
            _catalog.render(fam.name, knobs)  # validates the knob values


@pytest.mark.parametrize("family", [f.name for f in _catalog.families])
def test_rendered_source_is_clean(family):
    fam = _catalog.family(family)
    for knobs in [{}] + [dict(t.settings) for t in fam.tactics]:
        src = _catalog.render(family, knobs)
        compile(src, f"<{family}>", "exec")
        for bad in (".item(", ".tolist(", ".cuda(", ".cpu(", "synchronize"):
            assert bad not in src, f"{family} {knobs}: {bad} in the hot path"
        assert not re.search(r"\b0[xX][0-9a-fA-F.]*[pP]", src), "hex float literal"
        assert "def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale)" in src


@pytest.mark.parametrize("family,knobs", _cases())
def test_family_matches_reference(family, knobs, tiny_cases):
    run = _entry(family, knobs)
    for name, inputs, want in tiny_cases:
        got = run(**inputs)
        res = _check(got, want)
        assert res.passed, f"{family} {knobs} on {name}: {res.status} {res.message}"


@pytest.mark.parametrize("family,knobs", [
    ("split_kv", {}),
    ("split_kv", {"TARGET_CTAS": 2112, "MIN_SPLIT_TOKENS": 16, "BLOCK_N": 16}),
    ("split_kv", {"USE_DOT": False, "MIN_SPLIT_TOKENS": 16, "BLOCK_N": 16}),
    ("grouped_heads", {}),
    ("fused_split_kv", {}),
    ("fused_split_kv", {"TARGET_CTAS": 528, "MIN_SPLIT_TOKENS": 16, "BLOCK_N": 16}),
])
def test_empty_and_short_sequences(family, knobs):
    # One empty sequence (output 0, lse -inf) and a 1-token one that gets splits with no tokens.
    inputs = _edge_inputs([40, 0, 1, 25], num_pages=96)
    want = _task.reference(**inputs)
    got = _entry(family, knobs)(**inputs)
    res = _check(got, want)
    assert res.passed, f"{family} {knobs}: {res.status} {res.message}"
    out, lse = got
    assert torch.all(out[1] == 0)
    assert torch.all(torch.isneginf(lse[1]))
    assert torch.isfinite(lse[[0, 2, 3]]).all() and torch.isfinite(out.float()).all()


def test_fused_split_kv_allocates_once_and_returns_fresh_outputs():
    # One allocation per call (outputs and scratch carved from it), fresh on every call, and a
    # multi-split schedule whose combiner merges several partials.
    run = _entry("fused_split_kv", {"TARGET_CTAS": 528, "MIN_SPLIT_TOKENS": 16, "BLOCK_N": 16})
    assert run.__globals__["_num_splits"](2, 200) > 2
    inputs = _edge_inputs([120, 80], num_pages=256)
    want = _task.reference(**inputs)
    calls = []
    real_empty = torch.empty
    try:
        torch.empty = lambda *a, **k: calls.append(a) or real_empty(*a, **k)
        first = run(**inputs)
        second = run(**inputs)
    finally:
        torch.empty = real_empty
    assert len(calls) == 2
    assert first[0].data_ptr() != second[0].data_ptr()
    for got in (first, second):
        res = _check(got, want)
        assert res.passed, res.message


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("knobs", [{}, {"TARGET_CTAS": 528, "MIN_SPLIT_TOKENS": 16, "BLOCK_N": 32}])
def test_fused_split_kv_on_the_gpu(knobs):
    # The tagged-partial handshake (release/acquire across programs) only runs for real on a GPU:
    # repeated calls on the feedback shapes, every one checked.
    run = _entry("fused_split_kv", knobs, gpu=True)
    for w in _task.workload_set("feedback"):
        inputs = _task.make_inputs(w, device="cuda", seed=3)
        want = _task.reference(**inputs)
        for _ in range(10):
            res = _check(run(**inputs), want)
            assert res.passed, f"{w.name} {knobs}: {res.message}"
