"""MLA prefill's hopper_latent_tiles family (issue 22): correct under the Triton interpreter at three knob
settings on ragged, chunked and single-query batches, the shared-memory rule of its template, and an sm_90a
compile of the settings the GPU sweep leans on (no GPU needed)."""

from ksearch.eval.interpreter import prepare_interpreter
from tests.compiled_process import run_compiled, skip_without_ptxas

prepare_interpreter()  # before anything imports a Triton kernel (also fixes bf16 tl.dot, triton#11584)

import json
import re

import pytest
import torch

from ksearch import PROJECT_ROOT
from ksearch.eval.trusted.rules import check_outputs
from ksearch.instantiate.loader import load_entry_point
from ksearch.task import load_task
from ksearch.task.catalog import load_catalog
from ksearch.task.paged import paged_indices

PREFILL = "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1"
FAMILY = "hopper_latent_tiles"
SM_SCALE = 0.1352337747812271

_task = load_task(PREFILL)
_catalog = load_catalog(_task.strategies_dir, PREFILL)

# Three settings that take different code paths: defaults (64 rows = 4 tokens, two 256-wide q.k chunks and
# accumulators, persistent); 128 rows over two value halves in grid order (end-aligned tiles of 8 tokens,
# the lse written by one half); 32 rows, four value slices, 64-wide chunks, two programs per SM.
SETTINGS = {
    "defaults": {},
    "tall_halves_grid": {"BLOCK_M": 128, "VALUE_SPLIT": 2, "BLOCK_N": 32, "SCHEDULE": "grid"},
    "small_quarters": {"BLOCK_M": 32, "VALUE_SPLIT": 4, "QK_CHUNK": 64, "BLOCK_N": 32, "CTAS_PER_SM": 2},
}


def _inputs(q_lens, kv_lens, num_pages, extra_rows=0, seed=5):
    gen = torch.Generator().manual_seed(seed)
    total_q = sum(q_lens) + extra_rows
    qo = torch.zeros(len(q_lens) + 1, dtype=torch.int32)
    qo[1:] = torch.cumsum(torch.tensor(q_lens), 0).to(torch.int32)
    kv_indptr, kv_indices = paged_indices(kv_lens, num_pages, torch.Generator().manual_seed(seed))
    return {"q_nope": torch.randn(total_q, 16, 512, generator=gen).to(torch.bfloat16),
            "q_pe": torch.randn(total_q, 16, 64, generator=gen).to(torch.bfloat16),
            "ckv_cache": torch.randn(num_pages, 1, 512, generator=gen).to(torch.bfloat16),
            "kpe_cache": torch.randn(num_pages, 1, 64, generator=gen).to(torch.bfloat16),
            "qo_indptr": qo, "kv_indptr": kv_indptr, "kv_indices": kv_indices, "sm_scale": SM_SCALE}


# (q_lens, kv_lens, rows past qo_indptr[-1]). Every case has a sequence whose q_len is not a multiple of
# any tile's token count (a partial first tile) and KV longer than one BLOCK_N step.
CASES = {
    # an empty sequence, a single query over 70 keys, q == kv, a chunk over a prefix, 2 uncovered rows
    "ragged": ([3, 0, 1, 12, 2, 5], [3, 0, 70, 12, 9, 40], 2),
    # chunked prefill: 9 new tokens at the end of a 150-token KV (several unmasked blocks, then the diagonal)
    "chunked": ([9], [150], 0),
    # q_len = 1 everywhere: decode-like rows, one of them the whole KV of length 1
    "single_queries": ([1, 1, 1], [1, 33, 100], 0),
}


@pytest.fixture(scope="module")
def cases():
    out = {}
    for name, (q_lens, kv_lens, extra) in CASES.items():
        inputs = _inputs(q_lens, kv_lens, num_pages=240, extra_rows=extra)
        out[name] = (inputs, _task.reference(**inputs), extra)
    return out


@pytest.mark.parametrize("setting", list(SETTINGS))
def test_matches_reference_on_ragged_chunked_and_single_query_batches(setting, cases):
    run = load_entry_point(_catalog.render(FAMILY, SETTINGS[setting]), name_hint=f"hlt_{setting}")
    corr = _task.correctness                    # the task's rule: every element within 1e-2 abs or rel
    for name, (inputs, want, extra) in cases.items():
        got = run(**inputs)
        res = check_outputs(list(got), list(want), _task.definition.output_names, atol=corr.atol, rtol=corr.rtol,
                            required_matched_ratio=corr.required_matched_ratio, rule=corr.rule)
        assert res.passed, f"{setting} on {name}: {res.status} {res.message}"
        if extra:
            assert torch.all(got[0][-extra:] == 0) and torch.all(torch.isneginf(got[1][-extra:]))


def _module_constants(knobs):
    src = _catalog.render(FAMILY, knobs)
    return {k: int(v) for k, v in re.findall(r"(?m)^(BLOCK_N|NUM_STAGES|CTAS_PER_SM) = (\d+)$", src)}


def test_shared_memory_rule_lowers_tiles_and_stages_that_cannot_fit():
    # 64 rows: q 72 KB; 64-row tiles of 72 KB each: two in flight (num_stages 4) fit, three (5) do not.
    # Two such programs cannot share an SM, so a second persistent program per SM is not launched.
    assert _module_constants({"BLOCK_N": 64, "NUM_STAGES": 7, "CTAS_PER_SM": 2}) == {
        "BLOCK_N": 64, "NUM_STAGES": 4, "CTAS_PER_SM": 1}
    # 32-row tiles: four in flight (num_stages 7) fit beside the q tile.
    assert _module_constants({"BLOCK_N": 32, "NUM_STAGES": 7}) == {"BLOCK_N": 32, "NUM_STAGES": 7, "CTAS_PER_SM": 1}
    # 128 rows: q 144 KB; a 128-row tile cannot fit even once, so it is halved, and runs unpipelined.
    assert _module_constants({"BLOCK_M": 128, "VALUE_SPLIT": 2, "BLOCK_N": 128}) == {
        "BLOCK_N": 64, "NUM_STAGES": 1, "CTAS_PER_SM": 1}
    # 32 rows, 32-row tiles, 3 stages: 36 + 2 x 36 KB, two programs fit on one SM.
    assert _module_constants({"BLOCK_M": 32, "BLOCK_N": 32, "NUM_STAGES": 3, "CTAS_PER_SM": 2}) == {
        "BLOCK_N": 32, "NUM_STAGES": 3, "CTAS_PER_SM": 2}


_SCRIPT = PROJECT_ROOT / "benchmarks" / "sm90_compile_report.py"


def _sm90(settings):
    proc = run_compiled([str(_SCRIPT), PREFILL, FAMILY, *map(json.dumps, settings)], timeout=600)
    skip_without_ptxas(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def test_gpu_sweep_extremes_compile_for_sm90a_and_fit_shared_memory():
    """The largest tiles and deepest pipelines the catalog allows compile for sm_90a, fit an H200 block and
    run q.k / p.v on wgmma (HGMMA) at 64 and 128 rows; the pipelined ones issue cp.async gathers."""
    settings = [{"BLOCK_N": 64, "NUM_STAGES": 7}, {"BLOCK_N": 32, "NUM_STAGES": 7},
                {"BLOCK_M": 128, "VALUE_SPLIT": 2, "BLOCK_N": 128, "QK_CHUNK": 512}]
    rows = _sm90(settings)
    assert len(rows) == len(settings), rows
    for row in rows:
        assert "error" not in row, row
        assert row["shared"] <= 232448, row
        if "hgmma" in row:                       # cuobjdump ships with Triton's NVIDIA backend
            assert row["hgmma"] > 0, row
    assert all(r.get("ldgsts", 1) > 0 for r in rows[:2]), rows
