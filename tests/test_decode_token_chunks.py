"""The token_chunks families of both decode tasks (issue 23): work cut by KV tokens, not by sequences.

Under the Triton interpreter, against each task's reference (every element within 1e-2 abs or rel):
ragged batches where one sequence holds most tokens, empty sequences, batch 1, an all-empty batch, a
batch longer than one kv_indptr scan block, and chunks that straddle sequence boundaries (a small SM
count makes chunks of a few dozen tokens), also with the grid's programs run in shuffled order (the merge
by the last program of a sequence must not depend on which one that is). Then the host path: after the
first call of a shape, a call allocates only its two outputs and launches the cached compiled kernels
directly (two launches, or one when the last program merges); and every kernel compiles for sm_90a
(ptxas, no GPU) within an H200 block's shared memory.
"""

from ksearch.eval.interpreter import prepare_interpreter
from tests.compiled_process import run_compiled, skip_without_ptxas

prepare_interpreter()  # before anything imports a Triton kernel

import json
import math

import pytest
import torch

from ksearch.eval.trusted.rules import check_outputs
from ksearch.instantiate.loader import load_entry_point
from ksearch.task import load_task
from ksearch.task.catalog import load_catalog
from ksearch.task.paged import paged_indices

GQA = "gqa_paged_decode_h32_kv4_d128_ps1"
MLA = "mla_paged_decode_h16_ckv512_kpe64_ps1"
FAMILY = "token_chunks"
_tasks = {name: load_task(name) for name in (GQA, MLA)}
_catalogs = {name: load_catalog(t.strategies_dir, name) for name, t in _tasks.items()}

KNOBS = {
    GQA: [{}, {"BLOCK_N": 16, "MIN_CHUNK": 16, "PROGRAMS_PER_SM": 8, "NUM_WARPS": 2, "MERGE": "last_program"},
          {"BLOCK_N": 128, "MIN_CHUNK": 256, "PROGRAMS_PER_SM": 1, "NUM_WARPS": 8, "CACHED_LAUNCH": False,
           "MERGE_SPLIT": 2},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "WHOLE_SHORT": 2},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "WHOLE_SHORT": 1, "MERGE": "last_program"},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "MERGE_FIT": True, "WHOLE_SHORT": 1},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "CHUNK_ALIGN": True},
          # short sequences in programs of their own (at the chunk length; up to 128 tokens, with the last
          # program merging the long ones; beside WHOLE_SHORT)
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "OWN_SHORT": 1},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "OWN_SHORT": 128, "MERGE": "last_program"},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "OWN_SHORT": 1, "WHOLE_SHORT": 2},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "OWN_SHORT": 128, "OWN_CHUNKS": 2},
          # the row indices a tile ahead (with the merge kernel, and with the last program merging)
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "ROWS_AHEAD": True, "NUM_STAGES": 3},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "ROWS_AHEAD": True, "OWN_SHORT": 1, "MERGE": "last_program"},
          # the merge kernel as a programmatic dependent (rendered; the interpreter runs it without PDL)
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "PDL": True, "MERGE_SPLIT": 2}],
    MLA: [{}, {"BLOCK_N": 16, "MIN_CHUNK": 16, "VALUE_SPLIT": 4, "MERGE_HEADS": 16, "MERGE_SPLIT": 8},
          {"BLOCK_N": 64, "MIN_CHUNK": 32, "VALUE_SPLIT": 2, "MERGE": "last_program", "NUM_WARPS": 8},
          # short sequences whole, long ones cut: with the merge kernel, and merged by the last program
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "WHOLE_SHORT": 2},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "WHOLE_SHORT": 1, "MERGE": "last_program", "VALUE_SPLIT": 2},
          # the merge grid fitted to the batch (fewer column slices on the many-sequence cases)
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "MERGE_FIT": True},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "MERGE_FIT": True, "WHOLE_SHORT": 1, "MERGE_HEADS": 16},
          # chunks aligned to the mean sequence length
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "CHUNK_ALIGN": True, "MERGE": "last_program"},
          # short sequences in programs of their own: at the chunk length, and up to 128 tokens (with value
          # parts, and with the last program merging the long ones)
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "OWN_SHORT": 1},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "OWN_SHORT": 128, "VALUE_SPLIT": 2, "MERGE": "last_program"},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "OWN_SHORT": 1, "WHOLE_SHORT": 2},
          # own programs bounded to two chunks (and 128 tokens)
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "OWN_SHORT": 128, "OWN_CHUNKS": 2, "VALUE_SPLIT": 2},
          # the latent dimension in pieces (own accumulators, or one with value parts), the row indices a tile ahead
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "LATENT_SPLIT": 2, "ROWS_AHEAD": True},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "LATENT_SPLIT": 4, "OWN_SHORT": 1},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "LATENT_SPLIT": 4, "VALUE_SPLIT": 2, "ROWS_AHEAD": True,
           "MERGE": "last_program"},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "PDL": True, "ROWS_AHEAD": True},
          # bfloat16 partials, merged by the merge kernel and by the last program of a value part
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "PARTIAL_BF16": True, "MERGE_SPLIT": 2},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "PARTIAL_BF16": True, "VALUE_SPLIT": 2, "MERGE": "last_program"},
          # sequences of few partials merged by their last program, the others by the merge kernel
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "LAST_MERGE_MAX": 4, "LAST_MERGE_MIN_BATCH": 0, "MERGE_SPLIT": 2},
          {"BLOCK_N": 16, "MIN_CHUNK": 16, "LAST_MERGE_MAX": 4, "LAST_MERGE_MIN_BATCH": 0, "VALUE_SPLIT": 2,
           "PARTIAL_BF16": True}],
}

# (name, kv lengths, SM count the plan sees). With 32 SMs the chunks are a few dozen tokens long, so
# most of them cross a sequence boundary and the long sequence is spread over many chunks.
CASES = [
    ("ragged_one_long", [600, 0, 9, 17, 3, 0, 31], 32),
    ("long_last_empty_first", [0, 2, 5, 1, 190, 0], 32),
    ("batch1", [77], 4),
    ("all_empty", [0, 0, 0], 4),
    ("many_chunks_one_seq", [150], 132),
    ("uniform_short_straddling", [40] * 12, 8),      # chunks of 30: every other sequence crosses an edge
]


def _inputs(task, kv_lens, seed=1):
    gen = torch.Generator().manual_seed(seed)
    pages = max(sum(kv_lens) + 32, 64)
    indptr, indices = paged_indices(kv_lens, pages, torch.Generator().manual_seed(seed))
    batch, bf16 = len(kv_lens), torch.bfloat16
    if task == GQA:
        data = {"q": torch.randn(batch, 32, 128, generator=gen).to(bf16),
                "k_cache": torch.randn(pages, 1, 4, 128, generator=gen).to(bf16),
                "v_cache": torch.randn(pages, 1, 4, 128, generator=gen).to(bf16), "sm_scale": 128 ** -0.5}
    else:
        data = {"q_nope": torch.randn(batch, 16, 512, generator=gen).to(bf16),
                "q_pe": torch.randn(batch, 16, 64, generator=gen).to(bf16),
                "ckv_cache": torch.randn(pages, 1, 512, generator=gen).to(bf16),
                "kpe_cache": torch.randn(pages, 1, 64, generator=gen).to(bf16), "sm_scale": 0.1352337747812271}
    ordered = {n: data[n] for n in _tasks[task].definition.input_names if n in data}
    return {**ordered, "kv_indptr": indptr, "kv_indices": indices, "sm_scale": data["sm_scale"]}


def _module(task, knobs, sms):
    if knobs and "OWN_SHORT" not in knobs:
        # Knob sets written to cut short sequences at chunk edges and merge them: on these small batches the
        # default OWN_SHORT (256) would run every sequence in a program of its own. {} keeps every default.
        knobs = {"OWN_SHORT": 0, **knobs}
    run = load_entry_point(_catalogs[task].render(FAMILY, knobs), name_hint=f"tc_{task[:3]}")
    g = run.__globals__
    for table in ("_PLANS", "_LAUNCH", "_SCRATCH", "_COUNTS"):
        g[table].clear()
    g["_num_sms"] = lambda device: sms
    return run


def _check(task, got, inputs):
    want = _tasks[task].reference(**inputs)
    return check_outputs(list(got), list(want), _tasks[task].definition.output_names, atol=1e-2, rtol=1e-2)


def _params():
    out = []
    for task in (GQA, MLA):
        for i, knobs in enumerate(KNOBS[task]):
            out.append(pytest.param(task, knobs, id=f"{task[:3]}-knobs{i}"))
    return out


@pytest.mark.parametrize("task,knobs", _params())
def test_matches_reference_on_ragged_batches(task, knobs):
    for name, lens, sms in CASES:
        run = _module(task, knobs, sms)
        inputs = _inputs(task, lens)
        got = run(**inputs)
        res = _check(task, got, inputs)
        assert res.passed, f"{name} {knobs}: {res.status} {res.message}"
        out, lse = got
        for b, n in enumerate(lens):
            if n == 0:
                assert torch.all(out[b] == 0) and torch.all(torch.isneginf(lse[b])), name
            else:
                assert torch.isfinite(lse[b]).all(), name


@pytest.mark.parametrize("split", [2, 4])
def test_a_merge_split_over_the_head_dimension_matches_the_reference(split):
    """GQA's MERGE_SPLIT: each merge program takes a slice of the head dimension; only the first writes the lse."""
    knobs = {"BLOCK_N": 16, "MIN_CHUNK": 16, "MERGE_SPLIT": split}
    for name, lens, sms in CASES[:2]:
        run = _module(GQA, knobs, sms)
        assert run.__globals__["_plan"](torch.device("cpu"), len(lens), sum(lens)).merge_grid == (len(lens), 4 * split)
        inputs = _inputs(GQA, lens)
        res = _check(GQA, run(**inputs), inputs)
        assert res.passed, f"{name} {knobs}: {res.status} {res.message}"


@pytest.mark.parametrize("task,blocks,most", [(GQA, 4, 4), (MLA, 4, 8)])
def test_a_fitted_merge_grid_takes_fewer_slices_for_a_large_batch(task, blocks, most):
    """MERGE_FIT: at batch 256 on 132 SMs one slice per (sequence, head block) already gives 4 programs per SM,
    so the merge grid is 256 x blocks, not 256 x blocks x MERGE_SPLIT; a batch of 16 keeps every slice."""
    fitted, fixed = _module(task, {"MERGE_FIT": True}, 132), _module(task, {"MERGE_FIT": False}, 132)
    for batch, split in [(256, 1), (128, 2), (16, most), (1, most)]:
        total = batch * 512
        grid = fitted.__globals__["_plan"](torch.device("cpu"), batch, total).merge_grid
        assert math.prod(grid) == batch * blocks * split, (batch, grid)
        assert math.prod(fixed.__globals__["_plan"](torch.device("cpu"), batch, total).merge_grid) == batch * blocks * most


@pytest.mark.parametrize("task", [GQA, MLA])
def test_aligned_chunks_cut_equal_sequences_into_whole_pieces(task):
    """CHUNK_ALIGN: on 132 SMs equal sequences are cut at their edges (MLA at 256 x 512 tokens: chunks of 512, one
    sequence each, where the balanced ~500 cut nearly every one in two; GQA: 4 whole sequences per chunk), the
    chunk within 0.8..1.25 of the balanced one; a total that is no multiple of the batch keeps it."""
    aligned, plain = _module(task, {"CHUNK_ALIGN": True}, 132), _module(task, {"CHUNK_ALIGN": False}, 132)

    def chunk(run, batch, total):
        return run.__globals__["_plan"](torch.device("cpu"), batch, total).chunk

    for batch, length in [(256, 512), (256, 2048), (128, 8192), (16, 1500), (1, 546), (64, 4000)]:
        balanced, got = chunk(plain, batch, batch * length), chunk(aligned, batch, batch * length)
        assert (length % got == 0 or got % length == 0) and 0.8 <= got / balanced <= 1.25, (batch, length, balanced, got)
        assert got >= aligned.__globals__["MIN_CHUNK"]
    if task == MLA:     # 264 chunks wanted: one sequence per chunk, two chunks per sequence
        assert chunk(aligned, 256, 256 * 512) == 512 and chunk(aligned, 128, 128 * 8192) == 4096
    else:               # 66 chunks wanted (one per kv head each): four whole sequences per chunk
        assert chunk(aligned, 256, 256 * 512) == 2048
    # a ragged total (not a multiple of the batch) or no divisor near the balanced length: unchanged
    for batch, total in [(40, 902_001), (2, 2 * 7919), (0, 0), (3, 2)]:
        assert chunk(aligned, batch, total) == chunk(plain, batch, total), (batch, total)


def _ragged_plan(task, knobs):
    """(chunk length, kv lengths, the merge kernel's partials per step) of the ragged case under these knobs."""
    _, lens, sms = CASES[0]
    g = _module(task, knobs, sms).__globals__
    plan = g["_plan"](torch.device("cpu"), len(lens), sum(lens))
    # MLA's merge constants come with the plan (its column split may fit the batch); GQA's are global
    slots = plan.merge[0]["MERGE_SLOTS"] if task == MLA else g["MERGE_SLOTS"]
    return plan.chunk, lens, slots


@pytest.mark.parametrize("task,knobs", _params())
def test_chunks_straddle_sequence_boundaries(task, knobs):
    # The plan the ragged case runs: several chunks and boundaries inside chunks.
    chunk, lens, _ = _ragged_plan(task, knobs)
    starts = [sum(lens[:i]) for i in range(len(lens) + 1)]
    assert sum(lens) // chunk >= 2 and [s for s in starts[1:-1] if s % chunk], (chunk, starts)


@pytest.mark.parametrize("task", [GQA, MLA])
def test_some_setting_runs_the_merge_loop_more_than_once(task):
    # Among the settings run above, one spreads the long sequence over more chunks than the merge kernel reads
    # in one step, so its loop (the running maximum's rescale) runs more than once.
    plans = [_ragged_plan(task, knobs) for knobs in KNOBS[task]]
    assert any(lens[0] // chunk > slots for chunk, lens, slots in plans), plans


@pytest.fixture
def shuffled_programs(monkeypatch):
    """The interpreter runs a grid's programs in order; a GPU runs them in any order. Run them shuffled
    (a fresh permutation per launch), so no result may depend on which program of a chunk or of a sequence
    finishes first or last."""
    import random

    from triton.runtime import interpreter

    builder_cls = type(interpreter.interpreter_builder)
    original = builder_cls.set_grid_idx
    rng = random.Random(7)
    perm = []

    def set_grid_idx(self, x, y, z):
        if (x, y, z) == (0, 0, 0):
            perm[:] = rng.sample(range(self.grid_dim[0]), self.grid_dim[0])
        original(self, perm[x], y, z)

    monkeypatch.setattr(builder_cls, "set_grid_idx", set_grid_idx)


@pytest.mark.parametrize("task,knobs", [
    (GQA, {"MERGE": "last_program", "MIN_CHUNK": 16, "BLOCK_N": 16}),
    (GQA, {"MIN_CHUNK": 16, "BLOCK_N": 16}),
    (GQA, {"MERGE": "last_program", "WHOLE_SHORT": 2, "MIN_CHUNK": 16, "BLOCK_N": 16}),
    (MLA, {"MERGE": "last_program", "VALUE_SPLIT": 2, "MIN_CHUNK": 16, "BLOCK_N": 16}),
    (MLA, {"MERGE": "last_program", "VALUE_SPLIT": 1, "MIN_CHUNK": 32, "BLOCK_N": 16}),
    (MLA, {"MERGE": "last_program", "WHOLE_SHORT": 2, "MIN_CHUNK": 16, "BLOCK_N": 16}),
    (MLA, {"LAST_MERGE_MAX": 4, "LAST_MERGE_MIN_BATCH": 0, "MIN_CHUNK": 16, "BLOCK_N": 16}),
    (MLA, {"LAST_MERGE_MAX": 4, "LAST_MERGE_MIN_BATCH": 0, "LAST_MERGE_COLS": 128, "MIN_CHUNK": 16, "BLOCK_N": 16}),
    (MLA, {"MERGE": "last_program", "VALUE_SPLIT": 2, "LAST_MERGE_COLS": 128, "MIN_CHUNK": 16, "BLOCK_N": 16}),
], ids=["gqa-last", "gqa-kernel", "gqa-last-whole-short", "mla-last-split2", "mla-last", "mla-last-whole-short",
        "mla-last-max", "mla-last-max-cols128", "mla-last-split2-cols128"])
def test_any_program_order_gives_the_same_answer(task, knobs, shuffled_programs):
    lens = [300, 0, 9, 40, 3, 0, 31, 120]
    run = _module(task, knobs, 32)
    inputs = _inputs(task, lens, seed=4)
    for _ in range(2):              # the second call finds the arrival counters back at 0
        res = _check(task, run(**inputs), inputs)
        assert res.passed, f"{knobs}: {res.status} {res.message}"
    counts = run.__globals__["_COUNTS"]
    assert all(int(c.abs().sum()) == 0 for c in counts.values())


def test_last_merge_applies_only_from_its_batch_size():
    """LAST_MERGE_MIN_BATCH is a per-plan choice: in a batch of 8 sequences those of at most 4 partials are merged
    by their last chunk program (arrival counters; the merge kernel skips them), in a batch of 2 every cut
    sequence is left to the merge kernel; both give the reference's answer, and the counters end back at 0."""
    run = _module(MLA, {"LAST_MERGE_MAX": 4, "LAST_MERGE_MIN_BATCH": 8, "MIN_CHUNK": 16, "BLOCK_N": 16}, 8)
    g = run.__globals__
    many = _inputs(MLA, [40, 33, 0, 50, 21, 46, 9, 30], seed=5)    # chunks of 16: 1..4 partials
    few = _inputs(MLA, [70, 60], seed=6)                    # chunks of 16: 5 partials each
    for inputs in (many, few, many):
        res = _check(MLA, run(**inputs), inputs)
        assert res.passed, f"{res.status} {res.message}"
    plans = {batch: plan for (_, batch, _), plan in g["_PLANS"].items()}
    assert plans[8].chunk_consts[0]["LAST_MAX"] == 4 and plans[8].merge[0]["LAST_MAX"] == 4
    assert plans[2].chunk_consts[0]["LAST_MAX"] == 0 and plans[2].merge[0]["LAST_MAX"] == 0
    assert g["_COUNTS"] and all(int(c.abs().sum()) == 0 for c in g["_COUNTS"].values())


def test_batch_longer_than_one_indptr_scan_block(monkeypatch):
    # Programs count sequences over kv_indptr in blocks of SCAN entries: with SCAN cut to 4, a batch of
    # 11 takes three blocks (the kernels are the same for any SCAN, a compile-time constant).
    lens = [3, 1, 0, 2, 5, 1, 4, 2, 90, 1, 6]
    for task in (GQA, MLA):
        run = _module(task, {"MIN_CHUNK": 16, "BLOCK_N": 16}, 32)
        g = run.__globals__     # MLA keeps the chunk kernel's constants per LAST_MAX (0 at these knobs)
        monkeypatch.setitem(g["_CHUNK_CONSTS"] if task == GQA else g["_CHUNK_BY_LAST"][0][0], "SCAN", 4)
        inputs = _inputs(task, lens)
        res = _check(task, run(**inputs), inputs)
        assert res.passed, f"{task}: {res.status} {res.message}"


@pytest.mark.parametrize("task", [GQA, MLA])
def test_tiny_workloads(task):
    t = _tasks[task]
    run = _module(task, {}, 132)
    for w in t.workload_set("tiny") + t.workload_set("validate_cpu"):
        inputs = t.make_inputs(w, device="cpu", seed=0)
        res = _check(task, run(**inputs), inputs)
        assert res.passed, f"{w.name}: {res.status} {res.message}"


class _FakeCompiled:
    """Stands in for Triton's compiled kernel: `compiled[grid](*args)` records the direct launch."""

    def __init__(self, log, arg_names):
        self.log, self.arg_names = log, arg_names

    def __getitem__(self, grid):
        def direct(*args):
            # A compiled kernel takes every parameter positionally, compile-time ones included, and its
            # launcher reads three grid dimensions (Triton 3.6's runner indexes grid[0], grid[1], grid[2]).
            assert len(args) == len(self.arg_names)
            grid[0], grid[1], grid[2]
            self.log.append(("direct", grid, len(args)))
        return direct


class _FakeKernel:
    """Stands in for a @triton.jit kernel on a GPU: `kernel[grid](...)` returns a compiled kernel."""

    def __init__(self, log, arg_names):
        self.log, self.arg_names = log, arg_names

    def __getitem__(self, grid):
        def launch(*args, num_warps, num_stages, **consts):
            # Runtime arguments by position, compile-time ones by name, in the kernel's parameter order.
            assert list(self.arg_names) == list(self.arg_names[:len(args)]) + list(consts)
            self.log.append(("jit", grid, len(args) + len(consts)))
            return _FakeCompiled(self.log, self.arg_names)
        return launch


@pytest.mark.parametrize("task", [GQA, MLA])
@pytest.mark.parametrize("cached,merge", [(True, "kernel"), (False, "kernel"), (True, "last_program")])
def test_host_path_is_two_launches_and_two_allocations(task, cached, merge, monkeypatch):
    run = _module(task, {"CACHED_LAUNCH": cached, "MERGE": merge}, 132)
    launches = 2 if merge == "kernel" else 1
    g = run.__globals__
    log = []
    for kernel in ("_chunk_kernel", "_merge_kernel"):
        monkeypatch.setitem(g, kernel, _FakeKernel(log, g[kernel].arg_names))
    inputs = _inputs(task, [40, 0, 300, 5])
    run(**inputs)                                   # first call of the shape: plan, scratch, JIT
    assert [e[0] for e in log] == ["jit"] * launches
    allocations = []
    real_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda *a, **k: allocations.append(a) or real_empty(*a, **k))
    log.clear()
    outs = [run(**inputs) for _ in range(3)]
    assert len(allocations) == 6                    # output and lse, nothing else
    assert outs[0][0].data_ptr() != outs[1][0].data_ptr()
    kinds = [e[0] for e in log]
    assert kinds == (["direct"] if cached else ["jit"]) * 3 * launches
    # A direct launch passes every argument of the kernel, as the JIT launch did.
    jit_counts = {}
    for _kind, grid, n in log:
        jit_counts.setdefault(grid, set()).add(n)
    assert all(len(v) == 1 for v in jit_counts.values())
    # Another shape gets its own plan and launchers.
    log.clear()
    run(**_inputs(task, [40, 0, 301, 5]))
    assert [e[0] for e in log] == ["jit"] * launches


def test_direct_launch_refused_falls_back_to_the_jit(monkeypatch):
    run = _module(GQA, {}, 132)
    g = run.__globals__
    log = []

    class Refusing(_FakeCompiled):
        def __getitem__(self, grid):
            def refuse(*args):
                raise TypeError("function takes exactly 20 arguments")
            return refuse

    class Kernel(_FakeKernel):
        def __getitem__(self, grid):
            return lambda *a, **k: log.append("jit") or Refusing(log, self.arg_names)

    for kernel in ("_chunk_kernel", "_merge_kernel"):
        monkeypatch.setitem(g, kernel, Kernel(log, g[kernel].arg_names))
    monkeypatch.setitem(g, "_DIRECT", [True])
    inputs = _inputs(GQA, [40, 500])        # several chunks: two launches a call
    for _ in range(3):
        run(**inputs)
    assert log == ["jit"] * 6 and g["_DIRECT"] == [False]


@pytest.mark.parametrize("task", [GQA, MLA])
@pytest.mark.parametrize("knobs,lens,launches", [
    ({}, [40, 5], 1),                               # 45 tokens: one chunk holds every sequence whole
    ({}, [40, 0, 300, 5], 2),                       # several chunks: partials to merge
    ({"OWN_SHORT": 512, "OWN_CHUNKS": 0}, [40, 0, 300, 5], 1),   # 345 tokens: every sequence has its own program
    ({"OWN_SHORT": 128}, [40, 0, 300, 5], 2),       # the 300-token one is cut into chunks
])
def test_a_plan_with_nothing_to_merge_launches_no_merge_kernel(task, knobs, lens, launches, monkeypatch):
    """Knowable from the shapes alone: with one chunk no sequence is cut, and where the programs of their own
    take sequences up to the batch's total every sequence runs whole. The answer still matches the reference."""
    run = _module(task, {"CACHED_LAUNCH": False, **knobs}, 132)
    g = run.__globals__
    log = []
    real = {k: g[k] for k in ("_chunk_kernel", "_merge_kernel")}

    def spy(name):
        class Spy:
            def __getitem__(self, grid):
                log.append(name)
                return real[name][grid]
        return Spy()

    for kernel in real:
        monkeypatch.setitem(g, kernel, spy(kernel))
    inputs = _inputs(task, lens)
    out = run(**inputs)
    assert log == ["_chunk_kernel", "_merge_kernel"][:launches]
    res = _check(task, out, inputs)
    assert res.passed, f"{knobs} {lens}: {res.status} {res.message}"


def test_plans_stay_bounded_and_scratch_is_never_freed():
    run = _module(GQA, {}, 132)
    g = run.__globals__
    dev = torch.device("cpu")
    first = g["_plan"](dev, 4, 100).po
    for total in range(100, 100 + 4200):
        g["_plan"](dev, 4, total)
    assert len(g["_PLANS"]) <= 4097
    big = g["_plan"](dev, 512, 10 ** 6).po
    assert big.shape[0] >= 512 + 1 and any(s[1] is first for s in g["_KEEP"])


# ----------------------------------------------------------------------------- sm_90a compile

_AOT = r'''
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
out = []
for task_name, knobs in json.loads(sys.argv[1]):
    task = load_task(task_name)
    cat = load_catalog(task.strategies_dir, task.name)
    inputs = task.make_inputs(task.workload_set("tiny")[-1], device="cpu", seed=0)
    launches.clear()
    load_entry_point(cat.render("token_chunks", knobs), name_hint="aot_tc")(**inputs)
    for fn, args, kw in launches:
        sig, consts, attrs = {}, {}, {}
        for i, p in enumerate(fn.params):
            v = args[i] if i < len(args) else kw[p.name]
            if p.is_constexpr:
                sig[p.name], consts[p.name] = "constexpr", v
            elif isinstance(v, torch.Tensor):
                sig[p.name], attrs[(i,)] = PTR[v.dtype], [["tt.divisibility", 16]]
            else:
                sig[p.name] = "fp32" if isinstance(v, float) else "i32"
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                           target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": kw["num_warps"], "num_stages": kw["num_stages"]})
        out.append({"task": task_name, "kernel": fn.__name__, "shared": k.metadata.shared})
print(json.dumps(out))
'''


def test_kernels_compile_for_sm90a():
    """The interpreter cannot catch GPU-only failures (loop-carried types, layouts, shared memory)."""

    jobs = [(GQA, {}), (GQA, {"BLOCK_N": 128, "NUM_WARPS": 8, "NUM_STAGES": 4, "MERGE": "last_program"}),
            (GQA, {"WHOLE_SHORT": 1}), (GQA, {"ROWS_AHEAD": True, "NUM_STAGES": 4, "PDL": True, "OWN_SHORT": 0}),
            (MLA, {}), (MLA, {"BLOCK_N": 64, "VALUE_SPLIT": 2, "NUM_WARPS": 8, "NUM_STAGES": 3,
                              "MERGE": "last_program"}), (MLA, {"WHOLE_SHORT": 2}),
            (MLA, {"MERGE_FIT": True, "WHOLE_SHORT": 1}),
            (MLA, {"LATENT_SPLIT": 4, "ROWS_AHEAD": True, "PDL": True}), (MLA, {"LATENT_SPLIT": 2, "NUM_STAGES": 5}),
            (MLA, {"PARTIAL_BF16": True, "LAST_MERGE_MAX": 8, "LAST_MERGE_MIN_BATCH": 0}),
            (MLA, {"LAST_MERGE_MIN_BATCH": 0, "MIN_CHUNK": 16}),
            (MLA, {"LAST_MERGE_MIN_BATCH": 0, "MIN_CHUNK": 16, "LAST_MERGE_COLS": 256})]
    proc = run_compiled(["-c", _AOT, json.dumps(jobs)], timeout=300)
    skip_without_ptxas(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    kernels = json.loads(proc.stdout.strip().splitlines()[-1])
    # chunk and merge kernels; last_program, and LAST_MERGE_MAX 8 on a workload of at most 8 chunks: no merge kernel
    # (the defaults, LAST_MERGE_MAX 8 from a batch of 32, on its batch of 5: LAST_MAX 0; ungated, with 16-token
    # chunks, a 330-token sequence in 21 partials: both kernels with LAST_MAX 8)
    assert len(kernels) == 2 + 1 + 2 + 2 + 2 + 1 + 2 + 2 + 2 + 2 + 1 + 2 + 2
    for k in kernels:
        assert k["shared"] <= 232448, k


# ----------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("task", [GQA, MLA])
@pytest.mark.parametrize("knobs", [{}, {"MERGE": "last_program"}, {"MERGE": "last_program", "VALUE_SPLIT": 2},
                                   {"PDL": True, "ROWS_AHEAD": True}],
                         ids=["merge-kernel", "last-program", "last-program-split2", "pdl-rows-ahead"])
def test_one_captured_graph_serves_any_lengths_with_the_same_shapes(task, knobs):
    """The partition is computed on the device: a CUDA graph captured on one ragged batch replays correctly
    after kv_indptr and kv_indices are rewritten in place for other lengths (same batch, same total),
    and repeated eager calls (the direct launch path; with last_program, the arrival counters across SMs)
    stay correct."""
    if task == GQA and "VALUE_SPLIT" in knobs:
        pytest.skip("VALUE_SPLIT is an MLA knob")
    run = load_entry_point(_catalogs[task].render(FAMILY, knobs), name_hint=f"tc_gpu_{task[:3]}")
    lens_a = [5000, 3, 0, 120, 77, 800, 1]
    lens_b = [1, 800, 77, 120, 0, 3, 5000]
    inputs = {k: (v.cuda() if isinstance(v, torch.Tensor) else v) for k, v in _inputs(task, lens_a).items()}
    other = _inputs(task, lens_b, seed=2)
    for _ in range(20):
        res = _check(task, run(**inputs), inputs)
        assert res.passed, res.message
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = run(**inputs)
    for name in ("kv_indptr", "kv_indices"):
        inputs[name].copy_(other[name])
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        res = _check(task, got, inputs)
        assert res.passed, f"after new lengths: {res.status} {res.message}"


@pytest.mark.parametrize("task", [GQA, MLA])
def test_own_chunks_bounds_what_an_own_program_takes(task):
    """OWN_CHUNKS: own programs take sequences up to min(OWN_CHUNKS x chunk, OWN_SHORT) tokens, so neither a long
    chunk (a ragged batch's ~3100 tokens) nor a short one (a lone 208-token sequence, four 64-token chunks) hands
    one program a long sequence; without it, max(chunk, OWN_SHORT)."""
    def limit(knobs, batch, total):
        return _module(task, knobs, 132).__globals__["_plan"](torch.device("cpu"), batch, total).own_limit

    ragged = (40, 829_017)                          # chunks of thousands of tokens
    for batch, total in [ragged, (1, 208), (16, 457)]:
        chunk = _module(task, {}, 132).__globals__["_plan"](torch.device("cpu"), batch, total).chunk
        assert limit({"OWN_SHORT": 256, "OWN_CHUNKS": 0}, batch, total) == max(chunk, 256)
        assert limit({"OWN_SHORT": 256, "OWN_CHUNKS": 3}, batch, total) == min(3 * chunk, 256)
        assert limit({"OWN_SHORT": 0, "OWN_CHUNKS": 3}, batch, total) == -1
    assert limit({"OWN_SHORT": 256, "OWN_CHUNKS": 3}, *ragged) == 256
    assert limit({"OWN_SHORT": 256, "OWN_CHUNKS": 3}, 1, 208) < 208      # cut into chunks, not one program
