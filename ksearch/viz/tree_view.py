"""`ksearch show`: the plan tree with rich, best path highlighted."""

from __future__ import annotations

from typing import Any

import networkx as nx
from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ksearch.world_model import Node, WorldModel

_STATUS_STYLE = {"closed": "green", "open": "cyan", "failed": "red", "pruned": "dim", "decision": "white"}


def _label(wm: WorldModel, node: Node, on_best_path: bool, is_best: bool) -> Text:
    t = Text()
    t.append(f"{node.node_id} ", style="bold" if on_best_path else "")
    if node.is_root:
        t.append("root", style="bold")
    else:
        t.append(f"{node.decision or ''}: ", style="dim")
        t.append(node.choice or (node.action.title if node.action else ""))
    t.append(f"  [{node.status}]", style=_STATUS_STYLE.get(node.status, ""))
    if node.solution and node.solution.score is not None:
        score = node.solution.score
        t.append(f"  score {score:.4g}x", style="bold green" if is_best else "green")
        parent = wm.parent(node.node_id)
        if parent and parent.solution and parent.solution.score:
            ratio = score / parent.solution.score
            t.append(f" ({ratio:.2f}x parent)", style="green" if ratio >= 1 else "yellow")
    elif node.solution:
        t.append(f"  {node.solution.status}", style="red")
    if node.action:
        a = node.action
        pred = f"pred {a.expected_speedup:.3g}" if a.expected_speedup else "pred -"
        meas = f"meas {node.solution.score:.3g}" if node.solution and node.solution.score is not None else ""
        t.append(f"  {pred}{' / ' + meas if meas else ''}  diff {a.difficulty}  prio {a.score:.2f}", style="dim")
    if node.attempts:
        t.append(f"  attempts {node.attempts}", style="dim")
    if node.failed_cycles:
        t.append(f"  failed cycles {node.failed_cycles}", style="red")
    if is_best:
        t.append("  <- best", style="bold magenta")
    return t


def render_tree(wm: WorldModel, *, root_id: str | None = None, max_depth: int | None = None,
                best_node_id: str | None = None) -> Tree:
    best_path = {n.node_id for n in wm.path(best_node_id)} if best_node_id and best_node_id in wm else set()
    start = wm.node(root_id) if root_id else wm.root
    base_depth = wm.depth(start.node_id)

    def build(node: Node, tree: Tree) -> None:
        for child in wm.children(node.node_id, include_pruned=True):
            if max_depth is not None and wm.depth(child.node_id) - base_depth > max_depth:
                continue
            style = "bold magenta" if child.node_id in best_path else ""
            sub = tree.add(_label(wm, child, child.node_id in best_path, child.node_id == best_node_id),
                           guide_style=style or "dim")
            build(child, sub)

    top = Tree(_label(wm, start, start.node_id in best_path, start.node_id == best_node_id))
    build(start, top)
    return top


def family_table(wm: WorldModel) -> Table:
    """Per depth-1 family: its best measured kernel, where it is, and the cycles spent on it."""
    t = Table(title="families")
    for col in ("family", "best score", "mean latency ms", "best node", "closed", "attempts"):
        t.add_column(col)
    for fam in wm.children(wm.root.node_id, include_pruned=True):
        sub = [wm.node(n) for n in nx.descendants(wm.graph, fam.node_id) | {fam.node_id}]
        scored = [n for n in sub if n.solution and n.solution.score is not None]
        best = max(scored, key=lambda n: n.solution.score) if scored else None
        t.add_row(fam.choice or fam.node_id,
                  f"{best.solution.score:.4g}x" if best else "-",
                  f"{best.solution.latency_ms:.4g}" if best and best.solution.latency_ms else "-",
                  best.node_id if best else "-", str(sum(1 for n in sub if n.is_closed)),
                  str(sum(n.attempts for n in sub)))
    return t


def show_run(state: dict[str, Any], console: Console, *, node_id: str | None = None,
             depth: int | None = None) -> None:
    wm = WorldModel.from_json(state["tree"])
    best = state.get("best") or {}
    if node_id and node_id not in wm:
        raise KeyError(f"no node {node_id!r} in this run; node ids are shown in `ksearch show RUN_DIR`")
    console.print(render_tree(wm, root_id=node_id, max_depth=depth, best_node_id=best.get("node_id")))
    if node_id is None:
        console.print(family_table(wm))
    if wm.kernel_summary:
        console.print(Text(wm.kernel_summary, style="dim"))
