"""Selection: K-Search's greedy rule and the learned policy that uses what the tree has measured."""

import json
import math

import pytest

from ksearch.planner.selection import CALIBRATION_PRIOR_N, POLICIES, calibration, choose_next, explain, priority
from ksearch.world_model import AttachedSolution, WorldModel, parse_edit_script


def _node(node_id, score=0.5, difficulty=2, speedup=None, confidence=0.4, rating=5.0, choice=None):
    action = {"title": f"do {node_id}", "score": score, "difficulty": difficulty}
    if speedup is not None:
        action["expected_speedup"] = speedup
    return {"node_id": node_id, "decision": "d", "choice": choice or node_id, "rating": rating,
            "confidence": confidence, "action": action}


def _build(edges):
    """edges: [(parent, node_fields)] applied in order in one script."""
    wm = WorldModel()
    ops = [{"op": "insert_node", "parent_id": p, "node": n} for p, n in edges]
    res = wm.apply(parse_edit_script({"ops": ops}), round_index=0, max_new_nodes=len(ops))
    assert res.ok, res.errors
    return wm


def _close(wm, node_id, score):
    wm.record_attempt(node_id)
    wm.attach_solution(node_id, AttachedSolution(f"sol_{node_id}", None, 1, "PASSED", score))


def test_greedy_picks_by_score_then_difficulty_rating_and_id():
    wm = _build([("root", _node("a", score=0.6)), ("root", _node("b", score=0.9, difficulty=3)),
                 ("root", _node("c", score=0.9, difficulty=2, rating=4)),
                 ("root", _node("d", score=0.9, difficulty=2, rating=6)),
                 ("root", _node("e", score=0.9, difficulty=2, rating=6))])
    assert choose_next(wm, 4, policy="greedy").node_id == "d"      # score, difficulty, rating, then id
    wm.record_failed_cycle("d", retire_after=5)
    wm.record_failed_cycle("e", retire_after=5)
    assert choose_next(wm, 4, policy="greedy").node_id == "d"      # greedy ignores failures ...
    wm.record_failed_cycle("d", retire_after=2)
    assert choose_next(wm, 4, policy="greedy").node_id == "e"      # ... but retired nodes leave the frontier
    assert choose_next(wm, 2, policy="greedy").node_id == "e"
    assert choose_next(wm, 1, policy="greedy") is None              # the cap is never raised


def _good_and_bad_parents():
    """Two families measured: `good` at 2.0 (the best), `bad` at 0.5. Each has one open child."""
    wm = _build([("root", _node("good", speedup=2.0)), ("root", _node("bad", speedup=2.0)),
                 ("good", _node("good_next", score=0.5, speedup=1.1)),
                 ("bad", _node("bad_next", score=0.9, speedup=1.1))])
    _close(wm, "good", 2.0)
    _close(wm, "bad", 0.5)
    return wm


def test_learned_prefers_the_child_of_a_well_measured_parent():
    wm = _good_and_bad_parents()
    assert choose_next(wm, 4, policy="greedy").node_id == "bad_next"        # higher model score
    assert choose_next(wm, 4, policy="learned").node_id == "good_next"      # better measured base
    good, bad = explain(wm, "good_next"), explain(wm, "bad_next")
    assert good["parent_quality"] == pytest.approx(1.0) and bad["parent_quality"] == pytest.approx(0.25)
    assert good["parent_score"] == 2.0 and bad["parent_score"] == 0.5
    assert good["expected_score"] > bad["expected_score"] and good["prior"] < bad["prior"]


def test_calibration_of_over_optimistic_predictions_lowers_the_predicted_value():
    def tree(predicted):
        wm = _build([("root", _node("f1", speedup=predicted)), ("root", _node("f2", speedup=predicted)),
                     ("root", _node("f3", speedup=predicted)), ("f1", _node("next", speedup=1.5, confidence=1.0))])
        for f in ("f1", "f2", "f3"):
            _close(wm, f, 1.0)                 # every family measured exactly the baseline
        return wm

    honest, optimistic = tree(1.0), tree(2.0)
    assert calibration(honest).factor == pytest.approx(1.0)
    cal = calibration(optimistic)
    assert cal.n == 3 and [p.node_id for p in cal.pairs] == ["f1", "f2", "f3"]
    assert all(p.predicted == 2.0 and p.measured == 1.0 and p.ratio == 0.5 for p in cal.pairs)
    assert cal.raw_factor == pytest.approx(0.5)
    assert cal.factor == pytest.approx(math.exp(3 * math.log(0.5) / (3 + CALIBRATION_PRIOR_N)))  # shrunk to 1
    assert 0.5 < cal.factor < 1.0
    h, o = explain(honest, "next"), explain(optimistic, "next")
    assert h["calibrated_speedup"] == pytest.approx(1.5) and o["calibrated_speedup"] == pytest.approx(1.5 * cal.factor)
    assert o["expected_score"] < h["expected_score"] and o["prediction"] < h["prediction"]
    assert o["total"] < h["total"]


def test_calibration_is_parent_relative_and_uses_the_prediction_made_before_measuring():
    wm = _build([("root", _node("a", speedup=1.5)), ("a", _node("a1", speedup=1.2))])
    _close(wm, "a", 1.5)                       # vs baseline: exactly as predicted
    _close(wm, "a1", 1.5 * 1.2)                # vs its parent: exactly as predicted
    cal = calibration(wm)
    assert [(p.node_id, p.base_id) for p in cal.pairs] == [("a", "root"), ("a1", "a")]
    assert all(p.ratio == pytest.approx(1.0) for p in cal.pairs) and cal.factor == pytest.approx(1.0)
    # Re-writing the prediction after the fact does not change what was predicted.
    res = wm.apply(parse_edit_script({"ops": [{"op": "update_node", "node_id": "a1",
                                              "patch": {"action": {"expected_speedup": 9.0}}}]}),
                   round_index=2, max_new_nodes=3)
    assert res.ok and calibration(wm).factor == pytest.approx(1.0)
    assert calibration(WorldModel()).factor == 1.0 and calibration(WorldModel()).n == 0


def test_failed_cycles_halve_priority():
    wm = _build([("root", _node("x", score=0.8)), ("root", _node("y", score=0.4))])
    p0 = priority(wm, wm.node("x"), 0.0)
    wm.record_failed_cycle("x", retire_after=5)
    assert priority(wm, wm.node("x"), 0.0) == pytest.approx(p0 / 2)
    wm.record_failed_cycle("x", retire_after=5)
    assert priority(wm, wm.node("x"), 0.0) == pytest.approx(p0 / 4)
    assert choose_next(wm, 4).node_id == "y"
    why = explain(wm, "x")
    assert why["failed_cycles"] == 2 and why["penalty"] == pytest.approx(0.25)
    wm.record_attempt("x")                      # attempts cost a little on top
    assert explain(wm, "x")["penalty"] < 0.25


def test_untried_family_gets_an_exploration_bonus():
    wm = _build([("root", _node("fa", score=0.8)), ("root", _node("fb", score=0.5)),
                 ("fa", _node("fa1", score=0.6))])
    _close(wm, "fa", 1.0)
    assert choose_next(wm, 4, 0.0).node_id == "fa1"
    assert choose_next(wm, 4, 0.35).node_id == "fb"              # positional explore_weight still works
    a, b = explain(wm, "fa1", explore_weight=0.35), explain(wm, "fb", explore_weight=0.35)
    assert (a["family"], a["family_visits"]) == ("fa", 1) and (b["family"], b["family_visits"]) == ("fb", 0)
    assert b["bonus"] == pytest.approx(0.35) and a["bonus"] == pytest.approx(0.175)
    assert explain(wm, "fb", policy="greedy", explore_weight=0.35)["bonus"] == 0.0
    assert choose_next(wm, 4, 0.35, policy="greedy").node_id == "fa1"


def test_selection_is_deterministic_and_independent_of_insertion_order():
    fields = [("root", _node("m", score=0.5, speedup=1.2)), ("root", _node("k", score=0.5, speedup=1.2)),
              ("root", _node("z", score=0.5, speedup=1.2))]
    first = _build(fields)
    second = _build(list(reversed(fields)))
    for policy in [p for p in POLICIES if p != "random"]:     # random is tested in tests/test_random_policy.py
        picks = {choose_next(wm, 4, 0.35, policy=policy).node_id for wm in (first, second) for _ in range(3)}
        assert picks == {"k"}                   # a full tie is broken by node_id
    assert explain(first, "m") == explain(second, "m")


def test_explain_is_json_ready_and_adds_up():
    wm = _good_and_bad_parents()
    wm.record_failed_cycle("good_next", retire_after=5)
    for policy in POLICIES:
        why = explain(wm, wm.node("good_next"), policy=policy, explore_weight=0.2)
        json.dumps(why, allow_nan=False)
        for key in ("prior", "calibrated_speedup", "parent_quality", "penalty", "bonus", "total"):
            assert key in why
        assert why["total"] == pytest.approx(why["value"] * why["penalty"] + why["bonus"])
        assert why["policy"] == policy
    assert explain(wm, "good_next", policy="greedy")["total"] == 0.5


def test_unknown_policy_is_an_error_naming_the_valid_ones():
    wm = _build([("root", _node("a"))])
    for call in (lambda: choose_next(wm, 4, policy="ucb"), lambda: explain(wm, "a", policy="ucb")):
        with pytest.raises(ValueError, match="learned, greedy"):
            call()
    with pytest.raises(ValueError, match="explore_weight"):
        choose_next(wm, 4, -1.0)


def test_steps_of_a_split_run_from_the_kernel_the_split_step_would_have_used():
    wm = _build([("root", _node("fam")), ("fam", _node("big"))])
    _close(wm, "fam", 1.3)
    res = wm.apply(parse_edit_script({"ops": [{"op": "split_node", "node_id": "big", "children": [
        _node("step1", score=0.7), _node("step2", score=0.6)]}]}), round_index=1, max_new_nodes=3)
    assert res.ok, res.errors
    assert {n.node_id for n in wm.frontier()} == {"step1", "step2"}
    assert wm.base_of("step1").node_id == "fam"
    why = explain(wm, "step1")
    assert why["base_id"] == "fam" and why["parent_score"] == 1.3 and why["family"] == "fam"
    assert choose_next(wm, 4).node_id == "step1"
