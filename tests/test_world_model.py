"""World model: edit validation and atomicity, system-owned fields, frontier, selection."""

import json

import pytest

from ksearch.planner.selection import choose_next, priority
from ksearch.world_model import (
    AttachedSolution,
    EditScriptError,
    NoFallbackError,
    WorldModel,
    fallback_edit,
    parse_edit_script,
    parse_edit_text,
    render_compact,
)


def _action(title, score=0.5, difficulty=2, **kw):
    return {"title": title, "score": score, "difficulty": difficulty, **kw}


def _insert(parent, node_id, **action):
    return {"op": "insert_node", "parent_id": parent,
            "node": {"node_id": node_id, "decision": "family", "choice": node_id,
                     "action": _action(node_id, **action)}}


def _wm_with(*ops, cap=8):
    wm = WorldModel()
    res = wm.apply(parse_edit_script({"ops": list(ops)}), round_index=0, max_new_nodes=cap)
    assert res.ok, res.errors
    return wm


def _close(wm, node_id, score):
    wm.attach_solution(node_id, AttachedSolution(f"sol_{node_id}", None, 1, "PASSED", score))


def test_insert_update_and_frontier():
    wm = _wm_with(_insert("root", "a", score=0.9), _insert("root", "b", score=0.4), _insert("a", "a1"))
    assert [n.node_id for n in wm.frontier()] == ["a", "b"]     # a1 waits until a is closed
    _close(wm, "a", 1.2)
    assert {n.node_id for n in wm.frontier()} == {"b", "a1"}
    res = wm.apply(parse_edit_script({"ops": [{"op": "update_node", "node_id": "b",
                                              "patch": {"rating": 8, "action": {"score": 0.1}}}]}),
                   round_index=1, max_new_nodes=3)
    assert res.ok and wm.node("b").action.score == 0.1 and wm.node("b").rating == 8
    assert wm.node("b").action.title == "b"      # a partial action patch merges


def test_invalid_script_changes_nothing_and_lists_every_reason():
    wm = _wm_with(_insert("root", "a"))
    before = wm.to_json()
    script = parse_edit_script({"ops": [
        _insert("root", "ok_node"),                                       # valid on its own
        {"op": "update_node", "node_id": "missing", "patch": {"rating": 3}},
        {"op": "delete_node", "node_id": "root"},
    ]})
    res = wm.apply(script, round_index=1, max_new_nodes=3)
    assert not res.ok
    assert any("missing" in e for e in res.errors) and any("root cannot be deleted" in e for e in res.errors)
    assert wm.to_json() == before and "ok_node" not in wm


def test_parse_rejects_out_of_range_and_system_owned_fields():
    with pytest.raises(EditScriptError) as e:
        parse_edit_script({"ops": [
            {"op": "update_node", "node_id": "a", "patch": {"rating": 11, "solution": {"solution_id": "x"}}},
            {"op": "insert_node", "parent_id": "root", "node": {"action": {"title": "t", "difficulty": 9}}},
            {"op": "frobnicate"},
        ]})
    reasons = " | ".join(e.value.reasons)
    assert "rating=11" in reasons and "system-owned" in reasons and "difficulty" in reasons
    assert "frobnicate" in reasons


def test_solution_cannot_be_forged_by_update():
    wm = _wm_with(_insert("root", "a"))
    with pytest.raises(EditScriptError):
        parse_edit_script({"ops": [{"op": "update_node", "node_id": "a", "patch": {"solution_ref": {"solution_id": "x"}}}]})
    assert not wm.node("a").is_closed


def test_new_node_cap_counts_split_children():
    wm = _wm_with(_insert("root", "a"))
    script = parse_edit_script({"ops": [
        _insert("root", "b"), _insert("root", "c"),
        {"op": "split_node", "node_id": "a", "children": [{"action": _action("a-easy")}, {"action": _action("a-b")}]},
    ]})
    res = wm.apply(script, round_index=1, max_new_nodes=3)
    assert not res.ok and any("at most 3" in e for e in res.errors)


def test_split_turns_node_into_decision_over_children():
    wm = _wm_with(_insert("root", "a"))
    res = wm.apply(parse_edit_script({"ops": [{"op": "split_node", "node_id": "a", "parent_patch": {"notes": "too big"},
                                              "children": [{"action": _action("step 1")}, {"action": _action("step 2")}]}]}),
                   round_index=2, max_new_nodes=3)
    assert res.ok and wm.node("a").action is None and len(wm.children("a")) == 2
    assert all(c.is_open_action for c in wm.children("a"))


def test_delete_only_open_leaves_and_keeps_a_tombstone():
    wm = _wm_with(_insert("root", "a"), _insert("root", "b"), _insert("a", "a1"))
    _close(wm, "b", 1.0)
    for target, why in (("a", "has children"), ("b", "measured solution")):
        res = wm.apply(parse_edit_script({"ops": [{"op": "delete_node", "node_id": target}]}), round_index=1,
                       max_new_nodes=3)
        assert not res.ok and any(why in e for e in res.errors)
    res = wm.apply(parse_edit_script({"ops": [{"op": "delete_node", "node_id": "a1"}]}), round_index=1, max_new_nodes=3)
    assert res.ok and wm.node("a1").status == "pruned" and wm.children("a") == []


def test_json_round_trip_and_compact_rendering_is_bounded():
    wm = _wm_with(*[_insert("root", f"n{i}") for i in range(8)])
    _close(wm, "n3", 0.7)
    again = WorldModel.from_json(wm.to_json())
    assert again.to_json() == wm.to_json()
    text = render_compact(wm, max_chars=600)
    assert len(text) < 800 and "omitted" in text


def test_extract_edit_from_prose_and_fence():
    script = parse_edit_text('Sure.\n```json\n{"ops": [{"op": "delete_node", "node_id": "x"}]}\n```\nDone.')
    assert script.ops[0].node_id == "x"
    with pytest.raises(EditScriptError):
        parse_edit_text("I think we should tile more.")


def test_selection_respects_cap_failures_and_retirement():
    wm = _wm_with(_insert("root", "easy", score=0.5, difficulty=1), _insert("root", "hard", score=0.9, difficulty=5))
    assert choose_next(wm, max_difficulty=4).node_id == "easy"      # the cap is never raised
    assert choose_next(wm, max_difficulty=5).node_id == "hard"
    before = priority(wm, wm.node("hard"), 0.0)
    wm.record_failed_cycle("hard", retire_after=2)
    assert priority(wm, wm.node("hard"), 0.0) == pytest.approx(before / 2)
    assert choose_next(wm, max_difficulty=5).node_id == "easy"
    assert wm.record_failed_cycle("hard", retire_after=2) is True
    assert wm.node("hard").status == "failed" and "hard" not in {n.node_id for n in wm.frontier()}


def test_exploration_bonus_prefers_an_untried_family():
    wm = _wm_with(_insert("root", "fa", score=0.8), _insert("root", "fb", score=0.5))
    wm.record_attempt("fa")
    _close(wm, "fa", 1.0)
    wm.apply(parse_edit_script({"ops": [_insert("fa", "fa1", score=0.6)]}), round_index=1, max_new_nodes=3)
    assert choose_next(wm, 4, explore_weight=0.0).node_id == "fa1"       # greedy
    assert choose_next(wm, 4, explore_weight=0.35).node_id == "fb"       # family fb never tried


# ---- the edit-script contract ------------------------------------------------------------------------
def _reasons(obj):
    with pytest.raises(EditScriptError) as e:
        parse_edit_script(obj)
    return " | ".join(e.value.reasons)


def _apply(wm, *ops, cap=3):
    return wm.apply(parse_edit_script({"ops": list(ops)}), round_index=1, max_new_nodes=cap)


@pytest.mark.parametrize("text", [
    '```json\n{"ops": [{"op": "delete_node", "node_id": "x"}]}\n```',
    '```JSON {"ops": [{"op": "delete_node", "node_id": "x"}]}```',
    '~~~\n{"ops": [{"op": "delete_node", "node_id": "x"}]}\n~~~',
    'Plan: keep {BLOCK_N} as is. Example op: {"op": "noop"}.\nScript: {"ops": [{"op": "delete_node", "node_id": "x"}]} ok',
    '[{"op": "delete_node", "node_id": "x"}]',
    '\ufeff  {"ops": [{"op": "delete_node", "node_id": "x"}]}',
])
def test_reply_text_tolerates_fences_prose_and_a_bare_op_list(text):
    assert [type(o).__name__ for o in parse_edit_text(text).ops] == ["DeleteOp"]


def test_reply_text_errors_say_what_to_fix():
    with pytest.raises(EditScriptError, match="trailing commas") as e:
        parse_edit_text('Here:\n```json\n{"ops": [{"op": "delete_node", "node_id": "x"},]}\n```')
    assert "not valid JSON" in e.value.reasons[0]
    with pytest.raises(EditScriptError, match="nested too deeply"):
        parse_edit_text('{"ops": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(EditScriptError, match="no JSON object"):
        parse_edit_text("I would tile more.")
    with pytest.raises(EditScriptError, match="must be text"):
        parse_edit_text(None)
    with pytest.raises(EditScriptError, match='no "ops" list'):
        parse_edit_text('{"kernel_summary": "x"}')


def test_types_and_ranges_are_rejected_with_reasons_and_never_coerced():
    node = {"node_id": "ok", "rating": "7", "confidence": float("nan"), "notes": "x" * 9000,
            "impacts": {"memory": 11}, "action": {"title": "t", "difficulty": -1, "score": float("inf"),
                                                  "expected_speedup": 0, "params": []}}
    why = _reasons({"ops": [{"op": "insert_node", "parent_id": "root", "node": node}]})
    for part in ("rating must be a number", "without quotes", "confidence must be a finite number",
                 "notes is 9000 characters; at most 8000", "impacts.'memory'=11 is outside",
                 "difficulty=-1 is outside [1, 5]", "score must be a finite number",
                 "expected_speedup (predicted speedup over the parent's kernel)=0 is outside",
                 "params must be an object"):
        assert part in why, part
    assert "difficulty must be an integer" in _reasons(
        {"ops": [{"op": "insert_node", "parent_id": "root", "node": {"action": {"title": "t", "difficulty": 2.5}}}]})
    ok = parse_edit_script({"ops": [{"op": "insert_node", "parent_id": "root",
                                     "node": {"action": {"title": "t", "difficulty": 3.0}, "rating": 7}}]})
    assert ok.ops[0].node["action"]["difficulty"] == 3 and isinstance(ok.ops[0].node["rating"], float)


def test_op_shape_ids_and_references_are_checked():
    why = _reasons({"ops": [
        {"op": "insert_node", "parent_id": 5, "node": {"action": {"title": "t"}}},
        {"op": "insert_node", "parent_id": "root", "node": {"node_id": "has space", "action": {"title": "t"}}},
        {"op": "insert_node", "parent_id": "root", "node": {"action": {"score": 0.5}}},
        {"op": "update_node", "node_id": "a", "patch": {"node_id": "b"}, "why": "because"},
        {"op": "split_node", "node_id": "a", "children": []},
        {"op": "delete_node"},
    ], "notes": "top-level prose"})
    for part in ("parent_id must be a node id", "'has space' is not a well-formed id", "needs a title",
                 "an existing node keeps its id", "unknown keys 'why'", "children must be a non-empty list",
                 "is missing node_id", "unknown top-level keys 'notes'"):
        assert part in why, part
    assert "at most 64" in _reasons({"ops": [{"op": "delete_node", "node_id": "x"}] * 65})


def test_new_ids_must_be_unique_in_the_tree_and_in_the_script():
    wm = _wm_with(_insert("root", "a"))
    res = _apply(wm, _insert("root", "a"))
    assert not res.ok and "'a' already exists" in res.errors[0]
    res = _apply(wm, _insert("root", "b"), {"op": "insert_node", "parent_id": "root",
                                           "node": {"node_id": "b", "choice": "other", "action": _action("other")}})
    assert not res.ok and "'b' already exists" in res.errors[0] and "b" not in wm


def test_siblings_must_be_distinct():
    wm = _wm_with(_insert("root", "a"), _insert("root", "b"))
    dup_title = {"op": "insert_node", "parent_id": "root",
                 "node": {"decision": "family", "choice": "new", "action": _action("  A ")}}
    dup_pair = {"op": "insert_node", "parent_id": "root",
                "node": {"decision": "Family", "choice": "b", "action": _action("fresh")}}
    res = _apply(wm, dup_title, dup_pair)
    assert not res.ok and len(res.errors) == 2
    assert "duplicates sibling 'a'" in res.errors[0] and "duplicates sibling 'b'" in res.errors[1]
    rename = {"op": "update_node", "node_id": "b", "patch": {"action": {"title": "a"}}}
    assert "duplicates sibling 'a'" in _apply(wm, rename).errors[0]
    same_script = [{"op": "insert_node", "parent_id": "a", "node": {"action": _action("step")}}] * 2
    assert "duplicates sibling" in _apply(wm, *same_script).errors[0]
    assert _apply(wm, {"op": "insert_node", "parent_id": "a", "node": {"action": _action("a")}}).ok  # not a sibling


def test_root_is_untouchable_and_deletes_only_open_leaves():
    wm = _wm_with(_insert("root", "a"), _insert("root", "b"), _insert("root", "c"), _insert("a", "a1"))
    _close(wm, "b", 1.0)
    wm.record_failed_cycle("c", retire_after=1)
    before = wm.to_json()
    res = _apply(wm, {"op": "update_node", "node_id": "root", "patch": {"notes": "mine"}},
                 {"op": "split_node", "node_id": "root", "children": [{"action": _action("x")}]},
                 {"op": "delete_node", "node_id": "root"}, {"op": "delete_node", "node_id": "a"},
                 {"op": "delete_node", "node_id": "b"}, {"op": "delete_node", "node_id": "c"},
                 {"op": "delete_node", "node_id": "ghost"}, cap=8)
    assert not res.ok and len(res.errors) == 7          # every reason, not just the first
    text = " | ".join(res.errors)
    for part in ("root is fixed", "only an open or failed, non-root node can be split", "root cannot be deleted",
                 "has children", "measured solution", "retired", "'ghost' does not exist"):
        assert part in text, part
    assert wm.to_json() == before
    res = _apply(wm, {"op": "delete_node", "node_id": "a1"}, {"op": "delete_node", "node_id": "a1"})
    assert not res.ok and "was deleted" in res.errors[0]


def test_splits_keep_the_tree_a_tree():
    wm = _wm_with(_insert("root", "a"), _insert("a", "a1"), _insert("root", "c"))
    res = _apply(wm, {"op": "split_node", "node_id": "a", "children": [{"action": _action("x")}]})
    assert not res.ok and "already has children" in res.errors[0]
    wm.record_failed_cycle("c", retire_after=1)             # a failed step may be split into easier ones
    assert "never run" in _apply(wm, {"op": "insert_node", "parent_id": "c", "node": {"action": _action("y")}}).errors[0]
    res = _apply(wm, {"op": "split_node", "node_id": "c", "children": [{"action": _action("c-easy")}]})
    assert res.ok and wm.node("c").action is None and [n.node_id for n in wm.children("c")] == res.new_node_ids
    assert set(res.new_node_ids) <= {n.node_id for n in wm.frontier()}


def test_parent_solution_id_when_given_must_match():
    wm = _wm_with(_insert("root", "a"))
    _close(wm, "a", 1.0)
    bad = {"op": "insert_node", "parent_id": "a", "parent_solution_id": "sol_zzz", "node": {"action": _action("n")}}
    assert "does not match parent" in _apply(wm, bad).errors[0]
    assert _apply(wm, {**bad, "parent_solution_id": "sol_a"}).ok


def test_apply_text_reports_shape_and_tree_reasons_together():
    wm = _wm_with(_insert("root", "a"))
    before = wm.to_json()
    text = json.dumps({"ops": [{"op": "update_node", "node_id": "a", "patch": {"rating": 99}},
                               {"op": "delete_node", "node_id": "ghost"}]})
    res = wm.apply_text(text, round_index=1, max_new_nodes=3)
    assert not res.ok and any("rating=99" in e for e in res.errors) and any("ghost" in e for e in res.errors)
    assert wm.to_json() == before
    assert wm.apply_text('{"ops": [{"op": "update_node", "node_id": "a", "patch": {"rating": 9}}]}',
                         round_index=1, max_new_nodes=3).ok and wm.node("a").rating == 9


# ---- fallback edits ------------------------------------------------------------------------------------
def test_fallback_after_failure_lowers_the_node_and_is_valid():
    wm = _wm_with(_insert("root", "a", score=0.8, difficulty=5))
    wm.node("a").confidence = 0.6
    script = fallback_edit(wm, "after_failure", "a", reasons=["ops[0].patch.rating=42 is outside [0, 10]"])
    assert wm.apply(script, round_index=2, max_new_nodes=3).ok
    a = wm.node("a")
    assert a.action.score == pytest.approx(0.4) and a.confidence == pytest.approx(0.3) and a.action.difficulty == 5
    assert "fallback" in a.notes and "rating=42" in a.notes


def test_fallback_after_success_only_notes():
    wm = _wm_with(_insert("root", "a"))
    _close(wm, "a", 1.3)
    script = fallback_edit(wm, "after_success", "a")
    assert wm.apply(script, round_index=2, max_new_nodes=3).ok
    assert "fallback" in wm.node("a").notes and wm.children("a") == []


def test_fallback_propose_adds_one_retune_child_once():
    wm = _wm_with(_insert("root", "a", params={"family": "f", "set": {"BLOCK": 64}}), _insert("root", "b"))
    assert fallback_edit(wm, "propose").ops == []          # nothing measured yet: nothing to re-tune
    _close(wm, "a", 1.2)
    _close(wm, "b", 0.9)
    res = wm.apply(fallback_edit(wm, "propose"), round_index=2, max_new_nodes=3)
    assert res.ok and len(res.new_node_ids) == 1
    child = wm.node(res.new_node_ids[0])
    assert child.parent_id == "a" and child.notes == "fallback: re-tune"
    assert child.action.params == {"family": "f", "set": {"BLOCK": 64}} and child.action.expected_speedup == 1.0
    assert fallback_edit(wm, "propose").ops == []          # a second one would duplicate the first


def test_fallback_init_and_unknown_purposes():
    with pytest.raises(NoFallbackError, match="initial world model"):
        fallback_edit(WorldModel(), "init", reasons=["no JSON object found"])
    with pytest.raises(ValueError, match="after_failure, after_success, propose, init"):
        fallback_edit(WorldModel(), "refine")
    assert fallback_edit(WorldModel(), "after_failure", "ghost").ops == []
