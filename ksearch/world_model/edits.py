"""Edit scripts: the only way a model changes the plan tree. Parsed strictly into typed ops.

Script JSON:
    {"kernel_summary": str?, "open_questions": [str]?, "active_leaf_id": str?,
     "ops": [{"op": "insert_node", "parent_id": ..., "node": {...}},
             {"op": "update_node", "node_id": ..., "patch": {...}},
             {"op": "split_node", "node_id": ..., "parent_patch": {...}, "children": [{...}]},
             {"op": "delete_node", "node_id": ...}]}
Node fields a script may write: decision, choice, rating (0..10), confidence (0..1), impacts
({name: 0..10}), notes, action {title, description, rationale, difficulty 1..5, score 0..1,
expected_speedup > 0, params}. Solutions, attempt counters and status are system-owned.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Union

from ksearch.world_model.node import ACTION_FIELDS, EDITABLE_FIELDS


class EditScriptError(ValueError):
    """A script that cannot be applied; `reasons` lists every problem found."""

    def __init__(self, reasons: list[str]):
        self.reasons = reasons
        super().__init__("; ".join(reasons))


@dataclass
class InsertOp:
    parent_id: str
    node: dict[str, Any]
    node_id: str | None = None


@dataclass
class UpdateOp:
    node_id: str
    patch: dict[str, Any]


@dataclass
class SplitOp:
    node_id: str
    parent_patch: dict[str, Any]
    children: list[dict[str, Any]]


@dataclass
class DeleteOp:
    node_id: str


Op = Union[InsertOp, UpdateOp, SplitOp, DeleteOp]


@dataclass
class EditScript:
    ops: list[Op] = field(default_factory=list)
    active_leaf_id: str | None = None
    kernel_summary: str | None = None
    open_questions: list[str] | None = None


def _check_range(errors: list[str], where: str, value: Any, lo: float, hi: float, integer: bool = False) -> None:
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        errors.append(f"{where} must be {'an integer' if integer else 'a number'} in [{lo}, {hi}], got {value!r}")
    elif not lo <= value <= hi:
        errors.append(f"{where}={value} is outside [{lo}, {hi}]")


def validate_node_fields(fields: dict[str, Any], where: str, *, allow_id: bool) -> list[str]:
    """Type and range checks on the writable node fields; returns the reasons it is invalid."""
    errors: list[str] = []
    if not isinstance(fields, dict):
        return [f"{where} must be an object, got {type(fields).__name__}"]
    allowed = set(EDITABLE_FIELDS) | ({"node_id"} if allow_id else set())
    for key in fields:
        if key not in allowed:
            owned = key in ("solution", "solution_ref", "attempts", "failed_cycles", "pruned", "retired",
                            "parent_id", "created_round")
            errors.append(f"{where}.{key} is {'system-owned and cannot be edited' if owned else 'not a node field'}"
                          f" (writable: {', '.join(sorted(allowed))})")
    for key in ("decision", "choice", "notes"):
        if key in fields and fields[key] is not None and not isinstance(fields[key], str):
            errors.append(f"{where}.{key} must be a string")
    if "node_id" in fields and (not isinstance(fields["node_id"], str) or not fields["node_id"].strip()):
        errors.append(f"{where}.node_id must be a non-empty string")
    if "rating" in fields:
        _check_range(errors, f"{where}.rating", fields["rating"], 0, 10)
    if "confidence" in fields:
        _check_range(errors, f"{where}.confidence", fields["confidence"], 0, 1)
    if "impacts" in fields:
        imp = fields["impacts"]
        if not isinstance(imp, dict):
            errors.append(f"{where}.impacts must be an object of name -> 0..10")
        else:
            for k, v in imp.items():
                _check_range(errors, f"{where}.impacts.{k}", v, 0, 10)
    if "action" in fields and fields["action"] is not None:
        act = fields["action"]
        if not isinstance(act, dict):
            errors.append(f"{where}.action must be an object or null")
        else:
            for k in act:
                if k not in ACTION_FIELDS:
                    errors.append(f"{where}.action.{k} is not an action field ({', '.join(ACTION_FIELDS)})")
            if "title" in act and (not isinstance(act["title"], str) or not act["title"].strip()):
                errors.append(f"{where}.action.title must be a non-empty string")
            if "difficulty" in act:
                _check_range(errors, f"{where}.action.difficulty", act["difficulty"], 1, 5, integer=True)
            if "score" in act:
                _check_range(errors, f"{where}.action.score", act["score"], 0, 1)
            es = act.get("expected_speedup")
            if es is not None and (isinstance(es, bool) or not isinstance(es, (int, float)) or es <= 0):
                errors.append(f"{where}.action.expected_speedup must be a positive number or null")
            if "params" in act and not isinstance(act["params"], dict):
                errors.append(f"{where}.action.params must be an object")
    return errors


def parse_edit_script(obj: Any) -> EditScript:
    """Turn decoded JSON into typed ops, or raise EditScriptError with every reason."""
    if not isinstance(obj, dict):
        raise EditScriptError([f"an edit script must be a JSON object, got {type(obj).__name__}"])
    errors: list[str] = []
    unknown = set(obj) - {"ops", "active_leaf_id", "kernel_summary", "open_questions"}
    if unknown:
        errors.append(f"unknown top-level keys {sorted(unknown)}")
    raw_ops = obj.get("ops", [])
    if not isinstance(raw_ops, list):
        raise EditScriptError(errors + ["'ops' must be a list"])
    ops: list[Op] = []
    for i, raw in enumerate(raw_ops):
        where = f"ops[{i}]"
        if not isinstance(raw, dict) or "op" not in raw:
            errors.append(f"{where} must be an object with an 'op' field")
            continue
        kind = raw["op"]
        need = {"insert_node": ("parent_id", "node"), "update_node": ("node_id", "patch"),
                "split_node": ("node_id", "children"), "delete_node": ("node_id",)}.get(kind)
        if need is None:
            errors.append(f"{where}.op={kind!r} is not one of insert_node, update_node, split_node, delete_node")
            continue
        missing = [k for k in need if k not in raw]
        if missing:
            errors.append(f"{where} ({kind}) is missing {missing}")
            continue
        if kind == "insert_node":
            errors += validate_node_fields(raw["node"], f"{where}.node", allow_id=True)
            ops.append(InsertOp(str(raw["parent_id"]), dict(raw["node"]) if isinstance(raw["node"], dict) else {},
                                raw["node"].get("node_id") if isinstance(raw["node"], dict) else None))
        elif kind == "update_node":
            errors += validate_node_fields(raw["patch"], f"{where}.patch", allow_id=False)
            ops.append(UpdateOp(str(raw["node_id"]), dict(raw["patch"]) if isinstance(raw["patch"], dict) else {}))
        elif kind == "split_node":
            children = raw["children"]
            if not isinstance(children, list) or not children:
                errors.append(f"{where}.children must be a non-empty list")
                children = []
            for j, c in enumerate(children):
                errors += validate_node_fields(c, f"{where}.children[{j}]", allow_id=True)
            patch = raw.get("parent_patch") or {}
            errors += validate_node_fields(patch, f"{where}.parent_patch", allow_id=False)
            ops.append(SplitOp(str(raw["node_id"]), dict(patch) if isinstance(patch, dict) else {},
                               [dict(c) for c in children if isinstance(c, dict)]))
        else:
            ops.append(DeleteOp(str(raw["node_id"])))
    oq = obj.get("open_questions")
    if oq is not None and (not isinstance(oq, list) or not all(isinstance(q, str) for q in oq)):
        errors.append("open_questions must be a list of strings")
    ks = obj.get("kernel_summary")
    if ks is not None and not isinstance(ks, str):
        errors.append("kernel_summary must be a string")
    if errors:
        raise EditScriptError(errors)
    active = obj.get("active_leaf_id")
    return EditScript(ops, str(active) if active is not None else None, ks, oq)


_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)


def extract_json_object(text: str) -> Any:
    """The first JSON object in model text: a ```json fence if present, else the first balanced {...}."""
    for m in _FENCE.finditer(text):
        try:
            return json.loads(m.group(1))
        except json.JSONDecodeError:
            continue
    start = text.find("{")
    while start != -1:
        depth, in_str, esc = 0, False, False
        for i in range(start, len(text)):
            ch = text[i]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    try:
                        return json.loads(text[start:i + 1])
                    except json.JSONDecodeError:
                        break
        start = text.find("{", start + 1)
    raise EditScriptError(["no JSON object found in the model's reply; answer with one JSON edit script"])


def parse_edit_text(text: str) -> EditScript:
    return parse_edit_script(extract_json_object(text))
