"""Compact text renderings of the world model for prompts (bounded in size)."""

from __future__ import annotations

import json
from typing import Any

from ksearch.world_model.node import Node
from ksearch.world_model.tree import WorldModel


def node_brief(node: Node) -> dict[str, Any]:
    d: dict[str, Any] = {"id": node.node_id, "parent": node.parent_id, "status": node.status}
    if node.decision:
        d["decision"] = node.decision
    if node.choice:
        d["choice"] = node.choice
    d["rating"] = round(node.rating, 2)
    d["confidence"] = round(node.confidence, 2)
    if node.action:
        a = node.action
        d["action"] = {"title": a.title, "difficulty": a.difficulty, "score": round(a.score, 3),
                       "expected_speedup": a.expected_speedup}
        if a.params:
            d["action"]["params"] = a.params
    if node.solution:
        s = node.solution
        d["result"] = {"solution_id": s.solution_id, "status": s.status, "score": s.score, "round": s.round_index}
    if node.attempts or node.failed_cycles:
        d["attempts"], d["failed_cycles"] = node.attempts, node.failed_cycles
    return d


def render_compact(wm: WorldModel, max_chars: int = 6000) -> str:
    """Summary, open questions and the live nodes, shallowest first, cut to `max_chars`."""
    nodes = [n for n in wm.nodes() if not n.pruned]
    nodes.sort(key=lambda n: (wm.depth(n.node_id), n.node_id))
    head = {"kernel_summary": wm.kernel_summary, "open_questions": wm.open_questions[:6],
            "active_leaf_id": wm.active_leaf_id}
    text = json.dumps(head, indent=1)
    lines = [text, "nodes:"]
    used = len(text)
    for n in nodes:
        line = json.dumps(node_brief(n), separators=(",", ":"))
        if used + len(line) + 1 > max_chars:
            lines.append(f"... {len(nodes) - (len(lines) - 2)} more nodes omitted")
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)


def render_frontier(wm: WorldModel) -> str:
    rows = []
    for n in wm.frontier():
        a = n.action
        assert a is not None
        base = wm.base_of(n.node_id).node_id
        via = f", builds on {base}" if base != n.parent_id else ""
        rows.append(f"- {n.node_id} (parent {n.parent_id}{via}): {a.title} | score {a.score:.2f} | "
                    f"difficulty {a.difficulty} | expected x{a.expected_speedup} over its parent's kernel")
    return "\n".join(rows) or "(no executable actions)"
