"""Profile feedback, the model side: the typed profile an evaluation may carry, its table, what it
suggests, and how the offline model chooses its next knob from hand-made profiles."""

import json

import pytest

from ksearch.eval.report import EvalReport
from ksearch.llm.base import ModelRequest
from ksearch.llm.offline import OfflineModel, is_fused, read_plan_header
from ksearch.profile import (
    CPU_REASON,
    Hint,
    KernelInfo,
    Launch,
    Profile,
    Role,
    WorkloadProfile,
    advise,
    hint_change,
    knob_role,
    read_profile,
    render_profile,
)
from ksearch.task import load_task
from ksearch.task.catalog import load_catalog

TASK = "gqa_paged_decode_h32_kv4_d128_ps1"


def profile(spills=0, occupancy=0.5, launches=1, pct_small=60.0):
    kernels = [KernelInfo(name="_attn", registers_per_thread=128, spilled_bytes=spills, shared_memory_bytes=65536,
                          num_warps=4, num_stages=2, occupancy=occupancy)]
    if launches > 1:
        kernels.append(KernelInfo(name="_combine", registers_per_thread=32, num_warps=4, num_stages=1, occupancy=1.0))
    calls = [Launch(kernel=k.name, gpu_time_us=10.0) for k in kernels[:launches]]
    return Profile(kernels=kernels, workloads=[
        WorkloadProfile(workload="b1", launches=calls, floor_us=2.0, pct_of_limit=pct_small),
        WorkloadProfile(workload="b64", launches=calls, floor_us=80.0, pct_of_limit=70.0)])


def test_an_evaluation_carries_a_profile_or_says_why_not():
    cpu = EvalReport("s", "PASSED", "cpu").to_json()
    assert read_profile(cpu).profile is None and read_profile(cpu).reason == CPU_REASON
    gpu = EvalReport("s", "PASSED", "cuda:0").to_json()
    assert "no profile" in read_profile(gpu).reason
    assert read_profile({**gpu, "profile_note": "CUPTI unavailable"}).reason == "CUPTI unavailable"
    p = profile()
    assert read_profile({**gpu, "profile": p.to_json()}).profile == p
    bad = read_profile({**gpu, "profile": {"kernels": [{"name": "k", "occupancy": 3}]}})
    assert bad.profile is None and "malformed" in bad.reason and "occupancy" in bad.reason


def test_the_table_shows_kernels_launches_and_the_limit():
    text = render_profile(read_profile({"device": "cuda:0", "profile": profile(spills=256, launches=2).to_json()}))
    lines = text.splitlines()
    assert lines[0].split() == ["kernel", "regs/thread", "spill", "B", "smem", "KiB", "warps", "stages", "occupancy"]
    assert lines[1].split() == ["_attn", "128", "256", "64.0", "4", "2", "50%"]
    assert any(line.startswith("b1") and "_attn 10, _combine 10" in line and "60%" in line for line in lines)
    assert "reading: _attn spills 256 bytes; one call launches 2 kernels" in text
    assert render_profile(read_profile({"device": "cpu"})) == f"none ({CPU_REASON})"


@pytest.mark.parametrize("kw, hints", [
    ({}, ()),
    ({"spills": 64}, (Hint.SMALLER_TILES, Hint.FEWER_STAGES)),
    ({"occupancy": 0.125}, (Hint.SMALLER_TILES, Hint.FEWER_STAGES)),
    ({"launches": 2}, (Hint.FUSED_FAMILY,)),
    ({"pct_small": 10.0}, (Hint.MORE_SPLITS,)),
    ({"spills": 8, "launches": 2, "pct_small": 5.0},
     (Hint.SMALLER_TILES, Hint.FEWER_STAGES, Hint.FUSED_FAMILY, Hint.MORE_SPLITS)),
])
def test_advice(kw, hints):
    assert advise(profile(**kw)).hints == hints


@pytest.mark.parametrize("name, role", [
    ("BLOCK_N", (Role.TILE, 1)), ("block_m", (Role.TILE, 1)), ("ROWS", (Role.TILE, 1)), ("QK_CHUNK", (Role.TILE, 1)),
    ("NUM_STAGES", (Role.STAGES, 1)), ("proj_stages", (Role.STAGES, 1)),
    ("TARGET_CTAS", (Role.SPLITS, 1)), ("MAX_SPLITS", (Role.SPLITS, 1)), ("MIN_SPLIT_TOKENS", (Role.SPLITS, -1)),
    ("NUM_WARPS", (Role.OTHER, 1)), ("EVICT_FIRST", (Role.OTHER, 1)),
])
def test_knob_roles(name, role):
    assert knob_role(name) == role


def test_hint_changes_move_one_listed_value():
    values = {"BLOCK_N": [16, 32, 64, 128], "NUM_STAGES": [1, 2, 3], "TARGET_CTAS": [264, 528],
              "MIN_SPLIT_TOKENS": [16, 32, 64], "USE_DOT": [True, False]}
    knobs = {"BLOCK_N": 64, "NUM_STAGES": 1, "TARGET_CTAS": 264, "MIN_SPLIT_TOKENS": 32, "USE_DOT": True}
    assert hint_change(Hint.SMALLER_TILES, knobs, values) == {"BLOCK_N": 32}
    assert hint_change(Hint.FEWER_STAGES, knobs, values) == {}               # already at the fewest
    assert hint_change(Hint.MORE_SPLITS, knobs, values) == {"TARGET_CTAS": 528, "MIN_SPLIT_TOKENS": 16}
    assert hint_change(Hint.FUSED_FAMILY, knobs, values) == {}               # a family, not a knob


# ---- the offline model ---------------------------------------------------------------------------------
def _wm():
    """The initial tree of the offline model, with split_kv closed at its defaults (as the search sends it)."""
    model = OfflineModel()
    init = json.loads(model.complete(ModelRequest("init", "init", "", {"task": TASK})).text)
    nodes = [{"node_id": "root", "parent_id": None, "pruned": False, "action": None, "solution": None,
              "retired": False, "notes": "", "confidence": 0.5, "rating": 5.0}]
    for op in init["ops"]:
        n = op["node"]
        nodes.append({**n, "parent_id": "root", "pruned": False, "retired": False,
                      "solution": {"score": 1.0} if n["node_id"] == "fam_split_kv" else None})
    return model, {"nodes": nodes}


def _code(family):
    cat = load_catalog(load_task(TASK).strategies_dir, TASK)
    fam = cat.family(family)
    return f'# ksearch-plan: {json.dumps({"family": family, "knobs": fam.defaults()})}\n' + cat.render(family, {})


def _after_success(p):
    model, wm = _wm()
    ctx = {"task": TASK, "world_model": wm, "node_id": "fam_split_kv", "score": 1.0, "best_score": 1.0,
           "parent_score": None, "node_code": _code("split_kv"),
           "profile": p.to_json() if p else None, "profile_note": "" if p else CPU_REASON}
    ops = json.loads(model.complete(ModelRequest("edit", "after_success", "", ctx)).text)["ops"]
    children = [op["node"]["action"]["params"]["set"] for op in ops if op["op"] == "insert_node"]
    updates = {op["node_id"]: op["patch"] for op in ops if op["op"] == "update_node"}
    return children, updates


def test_spills_put_smaller_tiles_and_fewer_stages_first():
    plain, _ = _after_success(None)
    children, _ = _after_success(profile(spills=512))
    assert children[:2] == [{"BLOCK_N": 32}, {"NUM_STAGES": 1}]      # defaults: BLOCK_N 64, NUM_STAGES 2
    assert plain[:2] != children[:2]


def test_low_occupancy_does_the_same():
    children, _ = _after_success(profile(occupancy=0.1))
    assert children[:2] == [{"BLOCK_N": 32}, {"NUM_STAGES": 1}]


def test_small_shapes_far_from_the_limit_put_more_splits_first():
    children, _ = _after_success(profile(pct_small=8.0))
    assert children[0] == {"TARGET_CTAS": 1056, "MIN_SPLIT_TOKENS": 16}


def test_several_launches_raise_the_families_that_fuse_them():
    _, plain = _after_success(None)
    _, updates = _after_success(profile(launches=2))
    cat = load_catalog(load_task(TASK).strategies_dir, TASK)
    fused = {f"fam_{f.name}" for f in cat.families if is_fused(f) and f.name != "split_kv"}
    assert fused == {"fam_fused_split_kv", "fam_grouped_heads"}      # by name, and "a single launch"
    for node_id in fused:
        assert node_id not in plain
        assert updates[node_id]["action"]["score"] > 0.5 and "one launch per call" in updates[node_id]["notes"]


def test_an_improve_attempt_takes_the_profiles_move_first():
    model = OfflineModel()
    best = _code("split_kv")

    def next_knobs(p):
        ctx = {"task": TASK, "action_params": {"family": "split_kv", "set": {}}, "mode": "improve", "attempt": 2,
               "base_code": None, "cycle_codes": [best], "cycle_best_code": best,
               "profile": p.to_json() if p else None, "profile_note": ""}
        text = model.complete(ModelRequest("code", "improve", "", ctx)).text
        return read_plan_header(text)["knobs"]

    assert next_knobs(None)["BLOCK_N"] == 128                   # catalog order: the next value up first
    assert next_knobs(profile(spills=64))["BLOCK_N"] == 32      # the profile asks for smaller tiles


# ---- the planner hands the profile of the kernel a request is about to the model -----------------------
def _cycle_with_a_passing_attempt(tmp_path, report_profile):
    from ksearch.planner.cycle import Attempt
    from ksearch.store import records as R
    from tests.test_search import by_block, make_search

    s, ev, journal = make_search(tmp_path, by_block, max_rounds=3)
    s._setup()
    node = s.steps.select()
    state = s.steps.start_cycle(node, 1, 3)
    report = EvalReport("sid", "PASSED", "cuda:0", score=1.2, profile=report_profile)   # as the judge fills it
    evaluation = R.Evaluation(round=1, node_id=node.node_id, attempt=1, solution_id="sid", value=report.to_json())
    state.record(Attempt(1, 1, "action", report, (evaluation,), _code("split_kv")))
    return s, state, journal


def test_the_refine_request_carries_the_kernels_profile(tmp_path):
    p = profile(spills=128)
    s, state, journal = _cycle_with_a_passing_attempt(tmp_path, p.to_json())
    req = s.steps.close_request(state, s.state.tree, 1.2)
    journal.close()
    assert req.context["profile"] == p.to_json()
    assert "Hardware profile of this kernel (per call): kernel" in req.prompt
    assert "_attn spills 128 bytes" in req.prompt


def test_a_kernel_without_profile_asks_what_it_asked_before_profiles(tmp_path):
    """No profile (every CPU run, runs recorded before profiles): the requests carry no profile section and
    no profile keys, so their keys are those of the recorded runs and a resume of those replays."""
    s, state, journal = _cycle_with_a_passing_attempt(tmp_path, None)
    req = s.steps.close_request(state, s.state.tree, 1.2)
    code = s.prompts.code_request(state, "triton")
    journal.close()
    assert "profile" not in req.context and "profile_note" not in req.context
    assert "Hardware profile" not in req.prompt
    assert code.purpose == "improve" and "profile" not in code.context
    assert "Hardware profile" not in code.prompt


def test_an_improve_request_carries_the_profile_of_the_cycles_best(tmp_path):
    p = profile(launches=2)
    s, state, journal = _cycle_with_a_passing_attempt(tmp_path, p.to_json())
    code = s.prompts.code_request(state, "triton")
    journal.close()
    assert code.context["profile"] == p.to_json()
    assert "one call launches 2 kernels" in code.prompt


def test_the_profile_driven_edit_applies_to_the_tree():
    from ksearch.world_model import AttachedSolution, WorldModel

    model, wm = OfflineModel(), WorldModel()
    assert wm.apply_text(model.complete(ModelRequest("init", "init", "", {"task": TASK})).text, round_index=0,
                         max_new_nodes=8).ok
    wm.attach_solution("fam_split_kv", AttachedSolution("s1", None, 1, "PASSED", 1.0))
    p = profile(spills=64, launches=2, pct_small=5.0)
    ctx = {"task": TASK, "world_model": wm.to_json(), "node_id": "fam_split_kv", "score": 1.0, "best_score": 1.0,
           "parent_score": None, "node_code": _code("split_kv"), **{"profile": p.to_json(), "profile_note": ""}}
    res = wm.apply_text(model.complete(ModelRequest("edit", "after_success", "", ctx)).text, round_index=1,
                        max_new_nodes=3)
    assert res.ok, res.errors
    assert [wm.node(n).action.params["set"] for n in res.new_node_ids] == [
        {"BLOCK_N": 32}, {"NUM_STAGES": 1}, {"MIN_SPLIT_TOKENS": 16, "TARGET_CTAS": 1056}]
    assert {"fam_fused_split_kv", "fam_grouped_heads"} <= set(res.changed_node_ids)
