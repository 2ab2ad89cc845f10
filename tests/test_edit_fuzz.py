"""Fuzzing the edit-script contract: garbage in, EditScriptError or a clean rejection out, tree untouched.

Seeded and fast. Every reply is pushed through parse_edit_text + WorldModel.apply (the planner's path)
and through WorldModel.apply_text; the only exception allowed is EditScriptError, a rejected script must
leave the tree byte-identical, and an accepted one must keep the tree a valid tree whose system-owned
fields (root, solutions, counters) did not move.
"""

import json
import random
import time

import networkx as nx

from ksearch.world_model import AttachedSolution, EditScriptError, WorldModel, parse_edit_script, parse_edit_text

SEEDS = range(6)
CASES_PER_SEED = 150

_WEIRD_STRINGS = ["", " ", "7", "1e400", "NaN", "root", "ü∂ƒ 🚀", "\u0000", "\ud800", "a" * 300, "x" * 9000,
                  "null", "{", "```", "has space", "-leading", "ok_id"]
_WEIRD_NUMBERS = [0, -1, 1, 3, 5, 6, 0.5, 1.0, 2.5, 10, 11, 1e308, -1e308, 10 ** 30, float("nan"), float("inf"),
                  -float("inf"), True, False]
_FIELDS = ["node_id", "decision", "choice", "rating", "confidence", "impacts", "notes", "action", "solution",
           "attempts", "retired", "parent_id", "bogus"]
_ACTION_FIELDS = ["title", "description", "rationale", "difficulty", "score", "expected_speedup", "params", "bogus"]


def _random_json(rng, depth=0):
    kinds = ["str", "num", "bool", "null"] + (["list", "dict"] if depth < 4 else [])
    k = rng.choice(kinds)
    if k == "str":
        return rng.choice(_WEIRD_STRINGS)
    if k == "num":
        return rng.choice(_WEIRD_NUMBERS)
    if k == "bool":
        return rng.random() < 0.5
    if k == "null":
        return None
    if k == "list":
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    keys = _FIELDS + _ACTION_FIELDS + ["op", "ops", "patch", "node", "children", "parent_patch"]
    return {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _ids(wm):
    return [n.node_id for n in wm.nodes()]


def _valid_node(rng, wm):
    title = f"step {rng.randint(0, 10 ** 6)}"
    node = {"decision": "next", "choice": title, "rating": rng.uniform(0, 10), "confidence": rng.random(),
            "action": {"title": title, "difficulty": rng.randint(1, 5), "score": rng.random(),
                       "expected_speedup": rng.uniform(0.5, 2.0), "params": {"k": rng.randint(0, 9)}}}
    if rng.random() < 0.3:
        node["node_id"] = f"fz{rng.randint(0, 10 ** 6)}"
    return node


def _valid_op(rng, wm):
    ids = _ids(wm)
    kind = rng.choice(["insert_node", "update_node", "split_node", "delete_node"])
    target = rng.choice(ids)
    if kind == "insert_node":
        return {"op": kind, "parent_id": target, "node": _valid_node(rng, wm)}
    if kind == "update_node":
        return {"op": kind, "node_id": target, "patch": {"rating": rng.uniform(0, 10), "notes": "fz",
                                                           "action": {"score": rng.random()}}}
    if kind == "split_node":
        return {"op": kind, "node_id": target, "children": [_valid_node(rng, wm)]}
    return {"op": kind, "node_id": target}


def _mutate(rng, value, depth=0):
    """Break one thing somewhere inside `value` (or nothing, sometimes)."""
    if isinstance(value, dict) and value and depth < 6:
        key = rng.choice(list(value))
        roll = rng.random()
        if roll < 0.15:
            value.pop(key)
        elif roll < 0.3:
            value[rng.choice(_FIELDS + _ACTION_FIELDS)] = _random_json(rng)
        elif roll < 0.5:
            value[key] = rng.choice(_WEIRD_NUMBERS + _WEIRD_STRINGS + [None, [], {}])
        else:
            value[key] = _mutate(rng, value[key], depth + 1)
        return value
    if isinstance(value, list) and value and depth < 6:
        i = rng.randrange(len(value))
        value[i] = _mutate(rng, value[i], depth + 1)
        return value
    return rng.choice(_WEIRD_NUMBERS + _WEIRD_STRINGS + [None, [], {}, value])


def _script(rng, wm):
    ops = [_valid_op(rng, wm) for _ in range(rng.randint(0, 4))]
    obj = {"ops": ops}
    roll = rng.random()
    if roll < 0.35 and ops:
        _mutate(rng, obj)                                    # valid, then one thing broken somewhere
    elif roll < 0.45:
        obj["ops"].append(_random_json(rng))                 # valid ops followed by junk
    elif roll < 0.55:
        obj = _random_json(rng)                              # junk
    elif roll < 0.6:
        obj["active_leaf_id"] = rng.choice(_ids(wm) + _WEIRD_STRINGS)
    return obj


def _text(rng, obj):
    try:
        text = json.dumps(obj, ensure_ascii=rng.random() < 0.5)
    except (ValueError, TypeError):
        text = repr(obj)
    roll = rng.random()
    if roll < 0.2:
        text = f"Here is my edit:\n```json\n{text}\n```\nThat should help."
    elif roll < 0.3:
        text = text[: rng.randint(0, len(text))]             # a partial script
    elif roll < 0.35:
        text = "[" * rng.randint(500, 5000) + text
    elif roll < 0.4:
        text = f"{{ I think {text} }}"
    elif roll < 0.45:
        text = text.replace('"', "'")
    elif roll < 0.5:
        text = "".join(rng.choice('{}[]":,0123456789abc\\') for _ in range(rng.randint(0, 400)))
    return text


def _snapshot(wm):
    return json.dumps(wm.to_json(), sort_keys=True, ensure_ascii=True)


def _system_state(wm):
    """Everything an edit script must never move: the root and the measured/counted fields."""
    out = {"root": json.dumps(wm.root.to_json(), sort_keys=True)}
    for n in wm.nodes():
        out[n.node_id] = (json.dumps(n.to_json()["solution"], sort_keys=True), n.attempts, n.failed_cycles,
                          n.retired, n.parent_id, n.created_round)
    return out


def _check_tree(wm, before_system):
    assert nx.is_arborescence(wm.graph) and wm.root.is_root
    for n in wm.nodes():
        if n.parent_id is not None:
            assert wm.graph.has_edge(n.parent_id, n.node_id)
    after = _system_state(wm)
    for key, value in before_system.items():        # existing nodes: system-owned fields untouched
        assert after[key] == value, key
    text = json.dumps(wm.to_json(), allow_nan=False)  # no NaN/inf got in
    text.encode("utf-8")                              # no lone surrogates got in
    assert WorldModel.from_json(json.loads(text)).to_json() == wm.to_json()


def _seed_tree(rng):
    wm = WorldModel()
    ops = [{"op": "insert_node", "parent_id": "root", "node": {"node_id": f"fam{i}", "decision": "family",
                                                               "choice": f"fam{i}", "action": {"title": f"fam {i}"}}}
           for i in range(3)]
    assert wm.apply(parse_edit_script({"ops": ops}), round_index=0, max_new_nodes=3).ok
    wm.attach_solution("fam0", AttachedSolution("s0", None, 1, "PASSED", 1.2))
    wm.record_failed_cycle("fam2", retire_after=1)
    return wm


def _one_case(rng, wm, round_index):
    text = _text(rng, _script(rng, wm))
    before, system = _snapshot(wm), _system_state(wm)
    # The planner's path: parse, then apply.
    try:
        script = parse_edit_text(text)
    except EditScriptError as e:
        assert e.reasons and all(isinstance(r, str) and r for r in e.reasons)
        script = None
    if script is not None:
        probe = WorldModel.from_json(json.loads(before))
        res = probe.apply(script, round_index=round_index, max_new_nodes=3)
        if not res.ok:
            assert res.errors and _snapshot(probe) == before
    # The one-call path, on the live tree: never raises; rejected means untouched.
    res = wm.apply_text(text, round_index=round_index, max_new_nodes=3)
    if res.ok:
        _check_tree(wm, system)
        return True
    assert res.errors and all(isinstance(r, str) and r for r in res.errors)
    assert _snapshot(wm) == before
    return False


def test_garbage_never_raises_and_rejected_scripts_change_nothing():
    start = time.monotonic()
    accepted = rejected = 0
    for seed in SEEDS:
        rng = random.Random(seed)
        wm = _seed_tree(rng)
        for i in range(CASES_PER_SEED):
            if _one_case(rng, wm, round_index=i + 1):
                accepted += 1
            else:
                rejected += 1
            if rng.random() < 0.05:               # the system closes and fails nodes as the search would
                front = wm.frontier()
                if front:
                    n = rng.choice(front)
                    if rng.random() < 0.5:
                        wm.attach_solution(n.node_id, AttachedSolution(f"s{i}", None, i, "PASSED", rng.uniform(0.2, 3)))
                    else:
                        wm.record_failed_cycle(n.node_id, retire_after=2)
    assert accepted > 20 and rejected > 200, (accepted, rejected)    # both sides of the contract were exercised
    assert time.monotonic() - start < 10


def test_direct_python_objects_only_raise_edit_script_error():
    rng = random.Random(1234)
    for _ in range(2000):
        obj = _random_json(rng)
        if rng.random() < 0.5:
            obj = {"ops": [obj]}
        try:
            parse_edit_script(obj)
        except EditScriptError as e:
            assert e.reasons


def test_pathological_replies():
    wm = _seed_tree(random.Random(0))
    before = _snapshot(wm)
    nested_params = {"ops": [{"op": "insert_node", "parent_id": "root", "node": {"action": {
        "title": "deep", "params": json.loads("[" * 500 + "]" * 500)}}}]}
    replies = [
        "{" * 200_000,                                          # many candidate starts, none valid
        '{"ops": ' + "[" * 3000 + "]" * 3000 + "}",             # nested beyond the decoder's limit
        '{"ops": [{"op": "update_node", "node_id": "fam1", "patch": {"rating": ' + "9" * 5000 + "}}]}",
        '{"ops": [{"op": "update_node", "node_id": "fam1", "patch": {"rating": NaN}}]}',
        '{"ops": [{"op": "update_node", "node_id": "fam1", "patch": {"rating": 1e999}}]}',
        json.dumps(nested_params),
        "x" * 600_000,
        '{"ops": [{"op": "insert_node", "parent_id": "root", "node": {"action": {"title": "\\ud800"}}}]}',
        '{"ops": [{"op": "update_node", "node_id": "fam0", "patch": {"solution": null, "attempts": 0}}]}',
        '{"ops": [{"op": "update_node", "node_id": "fam1", "patch": {"rating": 5}}, {"op": "delete_node", '
        '"node_id": "root"}]}',                                 # valid, then invalid: nothing applies
    ]
    t0 = time.monotonic()
    for text in replies:
        res = wm.apply_text(text, round_index=1, max_new_nodes=3)
        assert not res.ok and res.errors, text[:80]
        assert _snapshot(wm) == before
    assert time.monotonic() - t0 < 5
