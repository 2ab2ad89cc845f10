"""Deterministic edits for when the model cannot produce a valid one.

The planner re-asks the model `edit_retries` times with the reasons its scripts were rejected. If it
still fails, the search must not stall or loop: K-Search's answer was to do nothing after a failure,
which re-selects the same node forever (weak point 2/10 of the reference). These edits are the least
the tree needs to stay honest, and nothing more, so they never pretend to be the model's insight:

- after_failure: the failed action's score and confidence are halved and its difficulty goes up by
  one (at most 5), so selection moves on;
- after_success: nothing is added; a note on the node records that the model's update was rejected;
- propose: one continuation child under the best closed node that repeats that node's plan ("fallback:
  re-tune"), only if it duplicates no sibling; otherwise nothing;
- init: there is no fallback; without a model-built tree there is nothing to search (NoFallbackError).

Every script is built from JSON and goes through `parse_edit_script`, so it obeys the same contract as
the model's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ksearch.world_model.edits import MAX_NOTES, MAX_SHORT_TEXT, EditScript, EditScriptError, parse_edit_script
from ksearch.world_model.tree import WorldModel

PURPOSES = ("after_failure", "after_success", "propose", "init")
RETUNE_NOTE = "fallback: re-tune"


class NoFallbackError(RuntimeError):
    """There is no deterministic replacement for this edit (the initial world model)."""


def _with_note(notes: str, line: str) -> str | None:
    """`notes` with `line` appended, or None when it would not fit the notes limit."""
    text = f"{notes}\n{line}".strip() if notes else line
    return text if len(text) <= MAX_NOTES else None


def _why(reasons: Iterable[str]) -> str:
    first = next(iter(reasons), None)
    return f" (model edits rejected: {first[:160]})" if first else " (model edits rejected)"


def fallback_edit(wm: WorldModel, purpose: str, node_id: str | None = None, *,
                  reasons: Iterable[str] = (), max_new_nodes: int = 1) -> EditScript:
    """The deterministic edit for `purpose` on the current tree (an empty script when nothing applies).

    `node_id` is the node the cycle ran on (after_failure, after_success); `reasons` are the model's
    last rejection reasons, quoted briefly in the note; `max_new_nodes` < 1 suppresses the propose child.
    Raises NoFallbackError for "init" and ValueError for an unknown purpose.
    """
    reasons = list(reasons)
    if purpose not in PURPOSES:
        raise ValueError(f"unknown edit purpose {purpose!r}; valid: {', '.join(PURPOSES)}")
    if purpose == "init":
        detail = f": {'; '.join(reasons)[:500]}" if reasons else ""
        raise NoFallbackError("the model did not produce a valid initial world model and there is no "
                              f"deterministic fallback for it; fix the model or its prompt and rerun{detail}")
    ops: list[dict[str, Any]] = []
    if purpose == "after_failure":
        ops = _after_failure(wm, node_id, reasons)
    elif purpose == "after_success":
        ops = _after_success(wm, node_id, reasons)
    elif purpose == "propose" and max_new_nodes >= 1:
        ops = _propose(wm)
    try:
        return parse_edit_script({"ops": ops})
    except EditScriptError:
        # Only possible when the tree itself holds values outside today's contract (a tree from an older
        # run): copying them would make the fallback invalid, so it does nothing rather than fail the run.
        return EditScript()


def _target(wm: WorldModel, node_id: str | None) -> Any:
    if node_id is None or node_id not in wm:
        return None
    node = wm.node(node_id)
    return None if node.is_root or node.pruned else node


def _after_failure(wm: WorldModel, node_id: str | None, reasons: list[str]) -> list[dict[str, Any]]:
    node = _target(wm, node_id)
    if node is None or node.action is None:
        return []
    a = node.action
    patch: dict[str, Any] = {
        "confidence": round(node.confidence * 0.5, 6),
        "action": {"score": round(a.score * 0.5, 6), "difficulty": min(5, a.difficulty + 1)},
    }
    notes = _with_note(node.notes, "fallback: lowered score and confidence, raised difficulty after a failed "
                                   "cycle" + _why(reasons))
    if notes is not None:
        patch["notes"] = notes
    return [{"op": "update_node", "node_id": node.node_id, "patch": patch}]


def _after_success(wm: WorldModel, node_id: str | None, reasons: list[str]) -> list[dict[str, Any]]:
    node = _target(wm, node_id)
    if node is None:
        return []
    notes = _with_note(node.notes, "fallback: the world-model update after this result was rejected; "
                                   "nothing added" + _why(reasons))
    return [] if notes is None else [{"op": "update_node", "node_id": node.node_id, "patch": {"notes": notes}}]


def _norm(text: str | None) -> str:
    return " ".join((text or "").split()).casefold()


def _propose(wm: WorldModel) -> list[dict[str, Any]]:
    best = wm.best_closed()
    if best is None:
        return []
    plan = best.action
    base_title = plan.title if plan is not None else (best.choice or best.node_id)
    title = f"Re-tune: {base_title}"[:MAX_SHORT_TEXT]
    decision, choice = "continue from best", "re-tune"
    for sib in wm.children(best.node_id):
        if (sib.action is not None and _norm(sib.action.title) == _norm(title)) or \
                (_norm(sib.choice) == _norm(choice) and _norm(sib.decision) == _norm(decision)):
            return []          # a re-tune (or an equivalent step) is already there: add nothing
    action: dict[str, Any] = {
        "title": title,
        "description": (plan.description if plan is not None else "")[:2000],
        "rationale": "fallback: the model's proposals were rejected; repeat the best plan and re-tune its knobs",
        "difficulty": min(plan.difficulty, 3) if plan is not None else 2,
        "score": 0.5,
        "expected_speedup": 1.0,
        "params": dict(plan.params) if plan is not None else {},
    }
    node = {"decision": decision, "choice": choice, "rating": best.rating,
            "confidence": round(min(best.confidence, 0.5), 6), "notes": RETUNE_NOTE, "action": action}
    return [{"op": "insert_node", "parent_id": best.node_id, "node": node}]
