"""World model: edit validation and atomicity, system-owned fields, frontier, selection."""

import pytest

from ksearch.planner.selection import choose_next, priority
from ksearch.world_model import (AttachedSolution, EditScriptError, WorldModel, parse_edit_script, parse_edit_text,
                                 render_compact)


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
    wm.record_failed_cycle("hard", retire_after=2)
    assert priority(wm, wm.node("hard"), 0.0) == pytest.approx(0.45)
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
