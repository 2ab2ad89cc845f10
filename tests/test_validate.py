"""Held-out workload sets and the validate gate on a new best.

(a) every task's `validate` / `validate_cpu` sets: disjoint from what the search selects on, spanning the
    shape space the issue asks for, within sane GPU memory; the CPU `tiny` sets hold a sequence longer
    than any catalog tile, a ragged batch and an empty sequence where the definition allows one;
(b) region labels from shapes alone;
(c) the gate: a kernel that wins on feedback but fails or regresses on validate never becomes the best,
    the verdicts are journaled, a resumed run replays them without measuring, `none` turns it off and
    runs recorded before the gate replay without it.
"""

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ksearch.config import Config
from ksearch.llm.offline import OfflineModel, read_plan_header
from ksearch.planner.search import Search, Services, Target
from ksearch.planner.validation import recorded_before_validation, resolve_set
from ksearch.store import Journal, RunDir, read_records
from ksearch.store import records as R
from ksearch.task import list_tasks, load_task
from ksearch.task.regions import Feature, RegionScheme, default_scheme, region_of, scheme_of
from tests.fakes import TASK, ScriptedEvaluator, by_block, scripted_report

GQA, MLA_D = "gqa_paged_decode_h32_kv4_d128_ps1", "mla_paged_decode_h16_ckv512_kpe64_ps1"
MLA_P = "mla_paged_prefill_causal_h16_ckv512_kpe64_ps1"
MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"
DECODES = (GQA, MLA_D)


def _sig(w):
    """What makes two workloads the same shape problem (names aside)."""
    p = {k: v for k, v in w.params.items() if k != "sm_scale"}
    return json.dumps({"axes": w.axes, "params": p}, sort_keys=True)


# ---------------------------------------------------------------------------------------------- (a) sets
@pytest.mark.parametrize("task_name", [GQA, MLA_D, MLA_P, MOE])
def test_validate_sets_are_held_out(task_name):
    sets = load_task(task_name).workload_sets()
    assert {"validate", "validate_cpu"} <= set(sets)
    for held, selected in (("validate", "feedback"), ("validate_cpu", "tiny")):
        assert sets[held], held
        assert not {w.name for w in sets[held]} & {w.name for w in sets[selected]}
        assert not {_sig(w) for w in sets[held]} & {_sig(w) for w in sets[selected]}, (held, selected)


@pytest.mark.parametrize("task_name", [GQA, MLA_D, MLA_P, MOE])
def test_held_out_sets_are_disjoint_from_the_gpu_default_set(task_name):
    """`ksearch run` on a GPU selects on the task's default GPU set (task.yaml), which need not be `feedback`
    (MLA prefill's is `search`, issue 22): validate and space must be held out from it too."""
    task = load_task(task_name)
    sets = task.workload_sets()
    selected = sets[task.default_workload_set(True)]
    for held in ("validate", "space"):
        assert not {w.name for w in sets[held]} & {w.name for w in selected}, held
        assert not {_sig(w) for w in sets[held]} & {_sig(w) for w in selected}, held


def test_prefill_gpu_default_set_holds_long_prompts_a_chunk_and_small_shapes():
    """Issue 22: the search must see prompts of 3k-16k tokens and a chunked prefill, and stay cheap enough
    for a 20-round run: at most 10 workloads and about 8 TFLOP (causal) per pass."""
    task = load_task(MLA_P)
    assert task.default_workload_set(True) == "search" and task.default_workload_set(False) == "tiny"
    ws = task.workload_set("search")
    longest = sorted(max(w.params["q_lens"]) for w in ws)
    assert longest[0] <= 64 and longest[-1] == 16384
    assert {3072, 8192, 16384} <= {max(w.params["q_lens"]) for w in ws}
    assert any(kv >= 8 * q >= 8 * 1024 for w in ws for q, kv in zip(w.params["q_lens"], w.params["kv_lens"]))
    assert any(len(set(w.params["q_lens"])) >= 3 and w.axes["total_q"] >= 3000 for w in ws), "a ragged batch"
    assert any(w.axes["total_q"] < 64 for w in ws) and any(w.axes["len_indptr"] - 1 >= 32 for w in ws)
    assert len(ws) <= 10 and sum(task.flops(w) for w in ws) < 8e12
    full = {(w.axes["total_q"], w.axes["len_indptr"] - 1, w.axes["num_kv_indices"]) for w in task.workload_set("full")}
    assert not {(w.axes["total_q"], w.axes["len_indptr"] - 1, w.axes["num_kv_indices"]) for w in ws} & full


@pytest.mark.parametrize("task_name", DECODES)
def test_decode_validate_spans_batch_and_length_uniform_and_ragged(task_name):
    ws = load_task(task_name).workload_set("validate")
    batches = {w.axes["batch_size"] for w in ws}
    lens = [n for w in ws for n in w.params["kv_lens"]]
    assert min(batches) == 1 and max(batches) == 256 and len(batches) >= 5
    assert min(lens) <= 64 and max(lens) == 65536
    ragged = [w for w in ws if len(set(w.params["kv_lens"])) > 1]
    one_long = [w for w in ragged if max(w.params["kv_lens"]) >= 16 * sorted(w.params["kv_lens"])[-2]]
    assert len(ragged) >= 3 and one_long, "needs ragged batches and one very long sequence among short ones"
    for w in ws:        # memory: the cache fits and the reference's padded batch stays bounded
        assert w.axes["num_kv_indices"] <= w.axes["num_pages"]
        assert w.axes["batch_size"] * max(w.params["kv_lens"]) <= 2_200_000


def test_prefill_validate_spans_total_q_single_many_and_chunked():
    ws = load_task(MLA_P).workload_set("validate")
    tq = [w.axes["total_q"] for w in ws]
    assert min(tq) == 1 and max(tq) == 16384
    assert any(w.axes["len_indptr"] == 2 and w.axes["total_q"] >= 4096 for w in ws)        # one long sequence
    assert any(w.axes["len_indptr"] - 1 >= 64 and max(w.params["q_lens"]) <= 64 for w in ws)  # many short ones
    chunked = [w for w in ws if any(kv > 4 * q >= 4 * 256 for q, kv in zip(w.params["q_lens"], w.params["kv_lens"]))]
    assert chunked, "needs a chunk of new tokens over a long cached prefix (kv_len > q_len)"
    for w in ws:
        assert all(kv >= q >= 1 for q, kv in zip(w.params["q_lens"], w.params["kv_lens"]))
        assert w.axes["num_kv_indices"] < w.axes["num_pages"]


def test_the_gate_is_a_subset_of_the_space_at_most_twice_the_feedback_set():
    """`validate` confirms every new best, so it stays small (issue 20: at most 2x a feedback evaluation's
    cost); `space` keeps the whole held-out shape space for bench."""
    for name in (*DECODES, MLA_P, MOE):
        sets = load_task(name).workload_sets()
        gate, space = [w.name for w in sets["validate"]], [w.name for w in sets["space"]]
        assert set(gate) < set(space) and len(gate) <= 2 * len(sets["feedback"]), name


def test_moe_validate_spans_t_from_1_to_16k():
    ts = sorted(w.axes["seq_len"] for w in load_task(MOE).workload_set("validate"))
    assert ts[0] == 1 and ts[-1] == 16384 and len(ts) >= 10
    assert all(b / a <= 4 for a, b in zip(ts, ts[1:]))           # no gap wider than 4x


@pytest.mark.parametrize("task_name", DECODES)
def test_cpu_decode_sets_hold_long_ragged_and_empty_sequences(task_name):
    task = load_task(task_name)
    for set_name in ("tiny", "validate_cpu"):
        lens = [w.params["kv_lens"] for w in task.workload_set(set_name)]
        assert max(max(b) for b in lens) >= 300 > 2 * 128       # longer than any tile (BLOCK_N <= 128)
        assert any(len(set(b)) > 2 for b in lens), "a ragged batch"
        assert any(0 in b for b in lens), "an empty sequence (the definition allows kv_len 0)"
        for w in task.workload_set(set_name):               # the reference accepts every one of them
            out, lse = task.reference(**task.make_inputs(w, device="cpu", seed=0))
            empty = [i for i, n in enumerate(w.params["kv_lens"]) if n == 0]
            assert torch.all(out[empty] == 0) and torch.all(torch.isneginf(lse[empty]))
            assert torch.isfinite(lse[[i for i in range(len(w.params["kv_lens"])) if i not in empty]]).all()


def test_cpu_prefill_sets_hold_long_kv_and_an_empty_sequence():
    task = load_task(MLA_P)
    for set_name in ("tiny", "validate_cpu"):
        ws = task.workload_set(set_name)
        assert max(max(w.params["kv_lens"]) for w in ws) >= 300
        assert any(q == 0 for w in ws for q in w.params["q_lens"])
        assert any(kv > q for w in ws for q, kv in zip(w.params["q_lens"], w.params["kv_lens"]))


def test_cpu_moe_sets_give_one_expert_more_rows_than_any_tile():
    task = load_task(MOE)
    mod = task.workloads_module
    for set_name in ("tiny", "validate_cpu"):
        most = 0
        for w in task.workload_set(set_name):
            off = w.params["local_expert_offset"]
            logits, bias = mod._routing(w.name, w.axes["seq_len"], off, w.params.get("hot_expert"))
            ids, _ = mod._reference_module().route(logits, bias, 2.5)
            local = ids[(ids >= off) & (ids < off + 32)] - off
            most = max(most, int(torch.bincount(local, minlength=32).max()))
        assert most > 128, (set_name, most)                      # block_m <= 128 in the catalog


# ------------------------------------------------------------------------------------------- (b) regions
def test_regions_come_from_shapes_and_cover_every_set():
    for name in list_tasks():
        task = load_task(name)
        scheme = scheme_of(task)
        for ws in task.workload_sets().values():
            for w in ws:
                r = region_of(task, w)
                assert r == scheme.of_axes(dict(w.axes)) and r.count("|") == len(scheme.features) - 1
    gqa = load_task(GQA)
    regions = {region_of(gqa, w) for w in gqa.workload_set("validate")}
    assert len(regions) >= 8 and "b0-1|L>32k" in regions
    s = RegionScheme((Feature("n", "x", (4, 16)),))
    assert [s.of_axes({"x": x}) for x in (1, 4, 5, 16, 17)] == ["n0-4", "n0-4", "n4-16", "n4-16", "n>16"]
    assert RegionScheme.from_json(s.to_json()) == s
    assert default_scheme(gqa.definition).features[0].num == gqa.definition.var_axes()[0]


# ---------------------------------------------------------------------------------------------- (c) gate
class HeldOutEvaluator(ScriptedEvaluator):
    """Feedback scores from `judge`; on validate workloads (names vcpu_*) from `held_out`."""

    def __init__(self, judge, held_out, crash_at=None):
        super().__init__(judge, crash_at)
        self.held_out = held_out

    def evaluate(self, source, solution_id, workloads, baseline):
        if not workloads[0].name.startswith("vcpu_"):
            return super().evaluate(source, solution_id, workloads, baseline)
        self.calls.append(solution_id)
        status, score = self.held_out(read_plan_header(source))
        return scripted_report(solution_id, status, score, workloads, baseline)

    confirm = evaluate          # a held-out confirmation is an evaluation here


def wide_tiles_break(plan):
    """On held-out shapes, 128-token tiles are wrong and split_kv is slow."""
    if plan["knobs"].get("BLOCK_N") == 128:
        return "INCORRECT_NUMERICAL", None
    return "PASSED", 0.5 if plan["family"] == "split_kv" else 1.0


def _search(path: Path, evaluator, validate="auto", max_rounds=10):
    cfg = OmegaConf.merge(OmegaConf.structured(Config), {"search": {"max_rounds": max_rounds},
                                                         "eval": {"validate": validate}})
    task = load_task(TASK)
    run = RunDir(path)
    if not run.exists():
        run.create(OmegaConf.to_yaml(cfg))
    journal = Journal(run.journal_path, fsync=False)
    return Search(cfg, Target(task, task.workload_set("tiny"), "tiny", "cpu"),
                  Services(OfflineModel(cfg.search.max_new_nodes), evaluator), run, journal), journal


def _run(path, evaluator, **kw):
    s, j = _search(path, evaluator, **kw)
    try:
        return s.run()
    finally:
        j.close()


def _records(path):
    return read_records(path / "journal.jsonl")[0]


def test_a_kernel_that_fails_or_regresses_on_validate_never_becomes_best(tmp_path):
    ev = HeldOutEvaluator(by_block, wide_tiles_break)
    out = _run(tmp_path / "r", ev)
    recs = _records(tmp_path / "r")
    verdicts = R.of_kind(recs, R.ValidateVerdict)
    measured = R.of_kind(recs, R.Validate)
    assert verdicts and len(measured) == len(verdicts)
    assert all(r.set == "validate_cpu" for r in measured)
    rejected = [r for r in verdicts if not r.accepted]
    assert rejected, "by_block favours BLOCK_N 128 on feedback; validate must refuse it"
    assert any("failed on validate_cpu" in r.basis for r in rejected)
    best_plan = read_plan_header((tmp_path / "r" / "best" / "solution.py").read_text())
    assert best_plan["knobs"].get("BLOCK_N") != 128
    assert out.best.validate_set == "validate_cpu" and out.best.validate_score is not None
    bests = R.of_kind(recs, R.BestRecord)
    assert all(r.validate_score is not None for r in bests)
    # each accepted best did not regress on validate against the one before it
    acc = [r for r in verdicts if r.accepted]
    for prev, new in zip(acc, acc[1:]):
        assert new.incumbent_validate_score == prev.validate_score
        assert new.validate_score >= prev.validate_score * 0.95
    rep = json.loads((tmp_path / "r" / "best" / "validate_report.json").read_text())
    assert rep["score"] == out.best.validate_score
    # a resumed (finished) run replays every verdict without measuring anything
    ev2 = HeldOutEvaluator(by_block, wide_tiles_break)
    again = _run(tmp_path / "r", ev2)
    assert ev2.calls == [] and again.best.solution_id == out.best.solution_id


def test_without_validation_the_feedback_winner_is_the_best(tmp_path):
    ev = HeldOutEvaluator(by_block, wide_tiles_break)
    out = _run(tmp_path / "r", ev, validate="none")
    assert not [r for r in _records(tmp_path / "r") if isinstance(r, (R.Validate, R.ValidateVerdict))]
    assert not any(c.endswith("@validate") for c in ev.calls)
    assert out.best.validate_score is None


def test_validate_setting_is_checked():
    task = load_task(TASK)
    assert resolve_set("auto", task, "cpu", "tiny") == "validate_cpu"
    assert resolve_set("auto", task, "cuda:0", "feedback") == "validate"
    assert resolve_set("auto", task, "cuda:0", "validate") is None       # never confirm on the selection set
    assert resolve_set("none", task, "cpu", "tiny") is None
    with pytest.raises(ValueError, match="no workload set"):
        resolve_set("nope", task, "cpu", "tiny")
    with pytest.raises(ValueError, match="selects on"):
        resolve_set("tiny", task, "cpu", "tiny")


def test_runs_recorded_before_validation_replay_without_it(tmp_path):
    class J:
        recorded = [R.RunStart(config={"eval": {"workloads": "auto"}})]
    assert recorded_before_validation(J())
    J.recorded = [R.RunStart(config={"eval": {"validate": "auto"}})]
    assert not recorded_before_validation(J())
