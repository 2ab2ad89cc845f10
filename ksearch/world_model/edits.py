"""Edit scripts: the only way a model changes the plan tree. The contract is strict and checked here.

Script JSON:
    {"kernel_summary": str?, "open_questions": [str]?, "active_leaf_id": str?,
     "ops": [{"op": "insert_node", "parent_id": ..., "node": {...}, "parent_solution_id": str?},
             {"op": "update_node", "node_id": ..., "patch": {...}},
             {"op": "split_node", "node_id": ..., "parent_patch": {...}, "children": [{...}]},
             {"op": "delete_node", "node_id": ...}]}
Node fields a script may write: node_id (new nodes only), decision, choice, rating (0..10),
confidence (0..1), impacts ({name: 0..10}), notes, action {title, description, rationale,
difficulty 1..5, score 0..1, expected_speedup (speedup over the parent's kernel), params}.
Solutions, attempt counters, retired/pruned flags and parents are system-owned.

Two stages check a script. This module is the first: the reply's text and the script's shape, types
and ranges, without looking at the tree. `WorldModel.apply` is the second: references, the root,
siblings, deletes and splits against the tree. Both collect every reason instead of stopping at the
first, because the reasons are shown to the model when it is asked again and it should fix everything
in one go. Policy for bad values: anything outside the contract is REJECTED with a reason that says
what to write instead; nothing is silently clipped, rounded or coerced (the one lossless exception:
an integral float such as 3.0 is accepted where an integer is expected).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from ksearch.world_model.node import ACTION_FIELDS, EDITABLE_FIELDS

# ---- limits (in one place so the reasons and the docs agree) -----------------------------------------
MAX_REPLY_CHARS = 500_000        # a model reply longer than this is not an edit script
MAX_JSON_CANDIDATES = 200        # '{' positions tried in prose before giving up (bounds the work on garbage)
MAX_OPS = 64
MAX_SPLIT_CHILDREN = 8
MAX_ID_CHARS = 64
MAX_REF_CHARS = 200              # a reference to an existing node (older ids may be longer than new ones)
MAX_SHORT_TEXT = 200             # title, decision, choice
MAX_LONG_TEXT = 2_000            # description, rationale
MAX_NOTES = 8_000
MAX_SUMMARY = 4_000
MAX_QUESTIONS = 12
MAX_QUESTION_CHARS = 500
MAX_IMPACTS = 16
MAX_PARAMS_CHARS = 4_000
MAX_PARAMS_DEPTH = 6
SPEEDUP_RANGE = (0.001, 1000.0)      # a parent-relative speedup outside this is a typo, not a plan

#: A new node id: letters, digits, '_', '.', '-'; starts with a letter, digit or '_'.
NODE_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*\Z")
OP_KINDS = ("insert_node", "update_node", "split_node", "delete_node")
_OP_KEYS = {"insert_node": (("parent_id", "node"), ("parent_solution_id",)),
            "update_node": (("node_id", "patch"), ()),
            "split_node": (("node_id", "children"), ("parent_patch",)),
            "delete_node": (("node_id",), ())}
_TOP_KEYS = ("ops", "active_leaf_id", "kernel_summary", "open_questions")
_SYSTEM_OWNED = ("solution", "solution_ref", "attempts", "failed_cycles", "pruned", "retired", "parent_id",
                 "created_round", "status")


class EditScriptError(ValueError):
    """A script that cannot be applied; `reasons` lists every problem found.

    `script` is what could be read despite the problems (ops with their valid fields only, marked
    `flawed`); `WorldModel.apply_text` dry-runs it so tree-level reasons are reported in the same reply.
    """

    def __init__(self, reasons: list[str], script: EditScript | None = None):
        self.reasons = reasons
        self.script = script
        super().__init__("; ".join(reasons))


@dataclass
class InsertOp:
    parent_id: str
    node: dict[str, Any]
    node_id: str | None = None
    parent_solution_id: str | None = None
    flawed: bool = False


@dataclass
class UpdateOp:
    node_id: str
    patch: dict[str, Any]
    flawed: bool = False


@dataclass
class SplitOp:
    node_id: str
    parent_patch: dict[str, Any]
    children: list[dict[str, Any]]
    flawed: bool = False


@dataclass
class DeleteOp:
    node_id: str
    flawed: bool = False


Op = InsertOp | UpdateOp | SplitOp | DeleteOp


@dataclass
class EditScript:
    ops: list[Op] = field(default_factory=list)
    active_leaf_id: str | None = None
    kernel_summary: str | None = None
    open_questions: list[str] | None = None


# ---- value checks: each appends reasons and returns the clean value or _BAD ------------------------------
_BAD = object()


def _show(value: Any, limit: int = 40) -> str:
    """A short, safe rendering of an offending value for a reason."""
    try:
        text = repr(value)
    except Exception:   # noqa: BLE001 - a repr of arbitrary decoded JSON cannot fail, but never crash on it
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def _json_type(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "an integer", float: "a number"}.get(type(value), type(value).__name__)


def _number(errors: list[str], where: str, value: Any, lo: float, hi: float, *, integer: bool = False) -> Any:
    kind = "an integer" if integer else "a number"
    if isinstance(value, str):
        try:
            float(value)
            hint = " (write the number without quotes)"
        except ValueError:
            hint = ""
        errors.append(f"{where} must be {kind} in [{lo:g}, {hi:g}], got the string {_show(value)}{hint}")
        return _BAD
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        errors.append(f"{where} must be {kind} in [{lo:g}, {hi:g}], got {_json_type(value)}")
        return _BAD
    if isinstance(value, float) and not math.isfinite(value):
        errors.append(f"{where} must be a finite number in [{lo:g}, {hi:g}], got {value}")
        return _BAD
    if integer:
        if isinstance(value, float):
            if not value.is_integer():
                errors.append(f"{where} must be an integer in [{lo:g}, {hi:g}], got {value}")
                return _BAD
        if not lo <= value <= hi:
            errors.append(f"{where}={_show(value)} is outside [{lo:g}, {hi:g}]")
            return _BAD
        return int(value)
    if not lo <= value <= hi:
        errors.append(f"{where}={_show(value)} is outside [{lo:g}, {hi:g}]")
        return _BAD
    return float(value)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _text(errors: list[str], where: str, value: Any, limit: int, *, nullable: bool = False,
          nonempty: bool = False) -> Any:
    if value is None and nullable:
        return None
    if not isinstance(value, str):
        errors.append(f"{where} must be a string{' or null' if nullable else ''}, got {_json_type(value)}")
        return _BAD
    if nonempty and not value.strip():
        errors.append(f"{where} must be a non-empty string")
        return _BAD
    if len(value) > limit:
        errors.append(f"{where} is {len(value)} characters; at most {limit} (shorten it)")
        return _BAD
    if not _encodable(value):
        errors.append(f"{where} contains an invalid unicode surrogate; use plain UTF-8 text")
        return _BAD
    return value


def _reference(errors: list[str], where: str, value: Any) -> Any:
    """A reference to a node that should already exist (existence is checked against the tree later)."""
    if not isinstance(value, str) or not value.strip():
        errors.append(f"{where} must be a node id (a non-empty string), got {_show(value)}")
        return _BAD
    if len(value) > MAX_REF_CHARS or not _encodable(value):
        errors.append(f"{where}={_show(value)} is not a node id of this tree")
        return _BAD
    return value


def check_new_node_id(value: Any) -> str | None:
    """Why `value` cannot be the id of a new node, or None when it is well-formed."""
    if not isinstance(value, str):
        return f"must be a string, got {_json_type(value)}"
    if not value or len(value) > MAX_ID_CHARS or not NODE_ID_RE.match(value):
        return (f"{_show(value)} is not a well-formed id: use 1-{MAX_ID_CHARS} characters from letters, digits, "
                f"'_', '.', '-', starting with a letter, digit or '_' (or leave node_id out to get one)")
    return None


def _params(errors: list[str], where: str, value: Any) -> Any:
    if not isinstance(value, dict):
        errors.append(f"{where} must be an object, got {_json_type(value)}")
        return _BAD
    # Depth first and without recursion: deep nesting must be a reason, not a RecursionError.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_PARAMS_DEPTH:
            errors.append(f"{where} is nested deeper than {MAX_PARAMS_DEPTH} levels; flatten it")
            return _BAD
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    errors.append(f"{where} has a non-string key {_show(k)}")
                    return _BAD
                stack.append((v, depth + 1))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, float) and not math.isfinite(item):
            errors.append(f"{where} contains {item}; use finite numbers")
            return _BAD
        elif not isinstance(item, (str, int, float, bool, type(None))):
            errors.append(f"{where} contains {_json_type(item)}, which is not JSON")
            return _BAD
    try:
        text = json.dumps(value, sort_keys=True, allow_nan=False)
    except (ValueError, TypeError) as e:
        errors.append(f"{where} is not plain JSON: {e}")
        return _BAD
    if len(text) > MAX_PARAMS_CHARS:
        errors.append(f"{where} is {len(text)} characters as JSON; at most {MAX_PARAMS_CHARS}")
        return _BAD
    if not _encodable(text):
        errors.append(f"{where} contains an invalid unicode surrogate")
        return _BAD
    return json.loads(text)     # a private copy: the tree never shares mutable state with the caller


def _action(errors: list[str], where: str, act: Any, *, need_title: bool) -> Any:
    if not isinstance(act, dict):
        errors.append(f"{where} must be an object (or null for no action), got {_json_type(act)}")
        return _BAD
    clean: dict[str, Any] = {}
    for k in act:
        if k not in ACTION_FIELDS:
            errors.append(f"{where}.{_show(k)} is not an action field (fields: {', '.join(ACTION_FIELDS)})")
    if "title" in act:
        v = _text(errors, f"{where}.title", act["title"], MAX_SHORT_TEXT, nonempty=True)
        if v is not _BAD:
            clean["title"] = v
    elif need_title:
        errors.append(f"{where} needs a title (a short name of the step)")
    for k in ("description", "rationale"):
        if k in act:
            v = _text(errors, f"{where}.{k}", act[k], MAX_LONG_TEXT)
            if v is not _BAD:
                clean[k] = v
    if "difficulty" in act:
        v = _number(errors, f"{where}.difficulty", act["difficulty"], 1, 5, integer=True)
        if v is not _BAD:
            clean["difficulty"] = v
    if "score" in act:
        v = _number(errors, f"{where}.score", act["score"], 0, 1)
        if v is not _BAD:
            clean["score"] = v
    if "expected_speedup" in act:
        es = act["expected_speedup"]
        if es is None:
            clean["expected_speedup"] = None
        else:
            v = _number(errors, f"{where}.expected_speedup (predicted speedup over the parent's kernel)", es,
                        *SPEEDUP_RANGE)
            if v is not _BAD:
                clean["expected_speedup"] = v
    if "params" in act:
        v = _params(errors, f"{where}.params", act["params"])
        if v is not _BAD:
            clean["params"] = v
    return clean


def clean_node_fields(errors: list[str], fields: Any, where: str, *, allow_id: bool, new: bool) -> dict[str, Any]:
    """Check node fields (a new node's when `new`, else a patch); return the valid ones, append reasons."""
    if not isinstance(fields, dict):
        errors.append(f"{where} must be an object of node fields, got {_json_type(fields)}")
        return {}
    clean: dict[str, Any] = {}
    allowed = set(EDITABLE_FIELDS) | ({"node_id"} if allow_id else set())
    for key in fields:
        if key not in allowed:
            if key in _SYSTEM_OWNED:
                what = "system-owned and cannot be edited"
                if key == "parent_id":
                    what += " (the parent is the op's parent_id)"
            elif key == "node_id":
                what = "not editable: an existing node keeps its id"
            else:
                what = "not a node field"
            errors.append(f"{where}.{_show(key)} is {what} (writable: {', '.join(sorted(allowed))})")
    if "node_id" in fields and allow_id:
        why = check_new_node_id(fields["node_id"])
        if why:
            errors.append(f"{where}.node_id {why}")
        if isinstance(fields["node_id"], str):
            clean["node_id"] = fields["node_id"]    # kept even when malformed, so a dry run can resolve it
    for key in ("decision", "choice"):
        if key in fields:
            v = _text(errors, f"{where}.{key}", fields[key], MAX_SHORT_TEXT, nullable=True)
            if v is not _BAD:
                clean[key] = v
    if "notes" in fields:
        v = _text(errors, f"{where}.notes", fields["notes"], MAX_NOTES)
        if v is not _BAD:
            clean["notes"] = v
    if "rating" in fields:
        v = _number(errors, f"{where}.rating", fields["rating"], 0, 10)
        if v is not _BAD:
            clean["rating"] = v
    if "confidence" in fields:
        v = _number(errors, f"{where}.confidence", fields["confidence"], 0, 1)
        if v is not _BAD:
            clean["confidence"] = v
    if "impacts" in fields:
        imp = fields["impacts"]
        if not isinstance(imp, dict):
            errors.append(f"{where}.impacts must be an object of name -> rating 0..10, got {_json_type(imp)}")
        elif len(imp) > MAX_IMPACTS:
            errors.append(f"{where}.impacts has {len(imp)} entries; at most {MAX_IMPACTS}")
        else:
            out: dict[str, float] = {}
            for k, v in imp.items():
                name = _text(errors, f"{where}.impacts key", k, MAX_SHORT_TEXT, nonempty=True)
                val = _number(errors, f"{where}.impacts.{_show(k)}", v, 0, 10)
                if name is not _BAD and val is not _BAD:
                    out[name] = val
            clean["impacts"] = out
    if "action" in fields:
        if fields["action"] is None:
            clean["action"] = None
        else:
            v = _action(errors, f"{where}.action", fields["action"], need_title=new)
            if v is not _BAD:
                clean["action"] = v
    return clean


# ---- the script ----------------------------------------------------------------------------------------
def parse_edit_script(obj: Any) -> EditScript:
    """Turn decoded JSON into typed ops, or raise EditScriptError with every reason."""
    if isinstance(obj, list) and obj and all(isinstance(o, dict) and "op" in o for o in obj):
        obj = {"ops": obj}          # a bare list of ops is a script without the wrapper
    if not isinstance(obj, dict):
        raise EditScriptError([f'an edit script must be a JSON object {{"ops": [...]}}, got {_json_type(obj)}'])
    errors: list[str] = []
    unknown = [k for k in obj if k not in _TOP_KEYS]
    if unknown:
        errors.append(f"unknown top-level keys {', '.join(_show(k) for k in unknown)} (allowed: {', '.join(_TOP_KEYS)})")
    script = EditScript()
    if "ops" not in obj:
        errors.append('the script has no "ops" list; answer {"ops": [...]} (an empty list when nothing should change)')
        raw_ops: list[Any] = []
    elif not isinstance(obj["ops"], list):
        errors.append(f'"ops" must be a list of op objects, got {_json_type(obj["ops"])}')
        raw_ops = []
    else:
        raw_ops = obj["ops"]
    if len(raw_ops) > MAX_OPS:
        errors.append(f"the script has {len(raw_ops)} ops; at most {MAX_OPS}")
        raw_ops = raw_ops[:MAX_OPS]
    for i, raw in enumerate(raw_ops):
        op = _parse_op(errors, f"ops[{i}]", raw)
        if op is not None:
            script.ops.append(op)
    if "active_leaf_id" in obj and obj["active_leaf_id"] is not None:
        v = _reference(errors, "active_leaf_id", obj["active_leaf_id"])
        if v is not _BAD:
            script.active_leaf_id = v
    if obj.get("kernel_summary") is not None:
        v = _text(errors, "kernel_summary", obj["kernel_summary"], MAX_SUMMARY)
        if v is not _BAD:
            script.kernel_summary = v
    if obj.get("open_questions") is not None:
        oq = obj["open_questions"]
        if not isinstance(oq, list):
            errors.append(f"open_questions must be a list of strings, got {_json_type(oq)}")
        elif len(oq) > MAX_QUESTIONS:
            errors.append(f"open_questions has {len(oq)} entries; at most {MAX_QUESTIONS}")
        else:
            qs = [_text(errors, f"open_questions[{j}]", q, MAX_QUESTION_CHARS) for j, q in enumerate(oq)]
            if all(q is not _BAD for q in qs):
                script.open_questions = qs
    if errors:
        raise EditScriptError(errors, script)
    return script


def _parse_op(errors: list[str], where: str, raw: Any) -> Op | None:
    if not isinstance(raw, dict) or "op" not in raw:
        errors.append(f"{where} must be an object with an \"op\" field ({', '.join(OP_KINDS)}), got {_show(raw)}")
        return None
    kind = raw["op"]
    if not isinstance(kind, str) or kind not in _OP_KEYS:
        errors.append(f"{where}.op={_show(kind)} is not one of {', '.join(OP_KINDS)}")
        return None
    required, optional = _OP_KEYS[kind]
    n_before = len(errors)
    missing = [k for k in required if k not in raw]
    if missing:
        errors.append(f"{where} ({kind}) is missing {', '.join(missing)}")
        return None
    extra = [k for k in raw if k != "op" and k not in required and k not in optional]
    if extra:
        errors.append(f"{where} ({kind}) has unknown keys {', '.join(_show(k) for k in extra)} "
                      f"(allowed: op, {', '.join(required + optional)})")
    if kind == "insert_node":
        parent = _reference(errors, f"{where}.parent_id", raw["parent_id"])
        node = clean_node_fields(errors, raw["node"], f"{where}.node", allow_id=True, new=True)
        psid = raw.get("parent_solution_id")
        if psid is not None:
            psid = _reference(errors, f"{where}.parent_solution_id", psid)
        if parent is _BAD:
            return None
        return InsertOp(parent, node, node.get("node_id"), None if psid is _BAD else psid,
                        flawed=len(errors) > n_before)
    target = _reference(errors, f"{where}.node_id", raw["node_id"])
    if kind == "update_node":
        patch = clean_node_fields(errors, raw["patch"], f"{where}.patch", allow_id=False, new=False)
        return None if target is _BAD else UpdateOp(target, patch, flawed=len(errors) > n_before)
    if kind == "split_node":
        children_raw = raw["children"]
        if not isinstance(children_raw, list) or not children_raw:
            errors.append(f"{where}.children must be a non-empty list of new nodes, got {_show(children_raw)}")
            children_raw = []
        elif len(children_raw) > MAX_SPLIT_CHILDREN:
            errors.append(f"{where}.children has {len(children_raw)} nodes; at most {MAX_SPLIT_CHILDREN}")
            children_raw = children_raw[:MAX_SPLIT_CHILDREN]
        children = [clean_node_fields(errors, c, f"{where}.children[{j}]", allow_id=True, new=True)
                    for j, c in enumerate(children_raw)]
        patch_raw = raw.get("parent_patch")
        patch = {} if patch_raw is None else clean_node_fields(errors, patch_raw, f"{where}.parent_patch",
                                                               allow_id=False, new=False)
        return None if target is _BAD else SplitOp(target, patch, children, flawed=len(errors) > n_before)
    return None if target is _BAD else DeleteOp(target, flawed=len(errors) > n_before)


# ---- finding the script in a reply ---------------------------------------------------------------------
_FENCE = re.compile(r"(```|~~~)[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n?(.*?)\1", re.DOTALL)
_DECODER = json.JSONDecoder()


def _decode_at(text: str, pos: int) -> tuple[Any, int] | tuple[str, int]:
    """Decode the JSON value starting at `pos`: (value, end), or (reason it is not JSON, how far it got)."""
    try:
        return _DECODER.raw_decode(text, pos)
    except RecursionError:
        return "it is nested too deeply", len(text)
    except json.JSONDecodeError as e:
        return f"it is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})", e.pos
    except ValueError as e:             # e.g. an integer literal with thousands of digits
        return f"it is not valid JSON ({e})", len(text)


def _looks_like_script(value: Any) -> bool:
    return (isinstance(value, dict) and "ops" in value) or \
        (isinstance(value, list) and bool(value) and all(isinstance(o, dict) and "op" in o for o in value))


class _Candidates:
    """What the reply contained: the first script-like value, else the first object, and the most
    promising broken candidate (the one that parsed furthest before failing) for the reason."""

    def __init__(self) -> None:
        self.first_obj: Any = None
        self.problem: str | None = None
        self.progress = -1

    def failed(self, reason: str, progress: int) -> None:
        if progress > self.progress:
            self.problem, self.progress = reason, progress


def extract_json_object(text: Any) -> Any:
    """The edit script in a model reply, tolerating fences and prose around it.

    Candidates, in order: the body of each fenced block (``` or ~~~, any language tag), then every JSON
    value that starts at a '{' in the text (and the whole text when it starts with '['). The first
    candidate that looks like a script (an object with "ops", or a list of ops) wins. If none does, a
    broken candidate that mentions "ops" is reported with its JSON error (a trailing comma, say);
    otherwise the first JSON object found is returned for the schema check to explain.
    """
    if not isinstance(text, str):
        raise EditScriptError([f"the model's reply must be text, got {_json_type(text)}"])
    if len(text) > MAX_REPLY_CHARS:
        raise EditScriptError([f"the reply is {len(text)} characters; an edit script is a small JSON object "
                               f"(at most {MAX_REPLY_CHARS}); answer with the script only"])
    seen = _Candidates()
    for m in _FENCE.finditer(text):
        body = m.group(3).strip()
        if not body or body[0] not in "{[":
            continue
        got, end = _decode_at(body, 0)
        if isinstance(got, str):
            seen.failed(f"the fenced block is not a usable edit script: {got}", end)
            continue
        if _looks_like_script(got):
            return got
        if seen.first_obj is None and isinstance(got, dict):
            seen.first_obj = got
    stripped = text.lstrip()
    if stripped.startswith("["):
        got, end = _decode_at(stripped, 0)
        if not isinstance(got, str) and _looks_like_script(got):
            return got
    pos, tries = text.find("{"), 0
    while pos != -1 and tries < MAX_JSON_CANDIDATES:
        tries += 1
        got, end = _decode_at(text, pos)
        if isinstance(got, str):
            seen.failed(f"the JSON starting at character {pos} is not usable: {got}", end - pos)
            pos = text.find("{", pos + 1)
            continue
        if _looks_like_script(got):
            return got
        if seen.first_obj is None:
            seen.first_obj = got
        pos = text.find("{", end)
    fix = 'answer with one JSON object {"ops": [...]} (double-quoted keys, no trailing commas, no comments)'
    if seen.problem and '"ops"' in text:
        raise EditScriptError([f"the edit script could not be read: {seen.problem}; {fix}"])
    if seen.first_obj is not None:
        return seen.first_obj
    if seen.problem:
        raise EditScriptError([f"no edit script could be read from the reply: {seen.problem}; {fix}"])
    raise EditScriptError([f"no JSON object found in the reply; {fix}"])


def parse_edit_text(text: Any) -> EditScript:
    """A model reply -> a checked EditScript, or EditScriptError with every reason."""
    return parse_edit_script(extract_json_object(text))
