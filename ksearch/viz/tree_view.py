"""`ksearch show`: the plan tree with rich, best path highlighted, optionally cut to some statuses or depth."""

from __future__ import annotations

import networkx as nx
from rich.console import Console
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ksearch.store.history import NotARunError, RunHistory
from ksearch.viz.speedups import families, measured_vs_parent, predicted_speedup
from ksearch.world_model import Node, WorldModel

#: Node.status values, for `ksearch show --status`.
NODE_STATUSES = ("open", "closed", "failed", "pruned", "decision")
_STATUS_STYLE = {"closed": "green", "open": "cyan", "failed": "red", "pruned": "dim", "decision": "white"}


def _label(wm: WorldModel, node: Node, on_best_path: bool, is_best: bool, context_only: bool = False) -> Text:
    """One node on one line. `context_only`: an ancestor shown only to place nodes that matched a filter."""
    t = Text(style="dim" if context_only else "")
    t.append(f"{node.node_id} ", style="bold" if on_best_path else "")
    if node.is_root:
        t.append("root", style="bold")
    else:
        t.append(f"{node.decision or ''}: ", style="dim")
        t.append(node.choice or (node.action.title if node.action else ""))
    t.append(f"  [{node.status}]", style=_STATUS_STYLE.get(node.status, ""))
    if node.solution and node.solution.score is not None:
        t.append(f"  score {node.solution.score:.4g}x", style="bold green" if is_best else "green")
    elif node.solution:
        t.append(f"  {node.solution.status}", style="red")
    if node.action:
        a = node.action
        # Both against the parent's kernel (the baseline for depth-1 nodes): see viz/speedups.py.
        meas, pred = measured_vs_parent(wm, node), predicted_speedup(node)
        t.append("  vs parent: ", style="dim")
        t.append(f"pred {pred:.3g}x" if pred else "pred -", style="dim")
        if meas is not None:
            t.append(" / ", style="dim")
            t.append(f"meas {meas:.3g}x", style="green" if meas >= 1 else "yellow")
        t.append(f"  diff {a.difficulty}  prio {a.score:.2f}", style="dim")
    if node.attempts:
        t.append(f"  attempts {node.attempts}", style="dim")
    if node.failed_cycles:
        t.append(f"  failed cycles {node.failed_cycles}", style="red")
    if is_best:
        t.append("  <- best", style="bold magenta")
    return t


def render_tree(wm: WorldModel, *, root_id: str | None = None, max_depth: int | None = None,
                best_node_id: str | None = None, statuses: set[str] | None = None) -> Tree:
    """The tree from `root_id` down `max_depth` levels. With `statuses`, only nodes in one of them are
    drawn, with their ancestors (dimmed) so each keeps its place in the plan."""
    best_path = {n.node_id for n in wm.path(best_node_id)} if best_node_id and best_node_id in wm else set()
    start = wm.node(root_id) if root_id else wm.root
    base_depth = wm.depth(start.node_id)
    keep: set[str] | None = None
    if statuses is not None:
        keep = set()
        for n in wm.nodes():
            if n.status in statuses:
                keep.update(p.node_id for p in wm.path(n.node_id))

    def label(node: Node) -> Text:
        context = statuses is not None and node.status not in statuses
        return _label(wm, node, node.node_id in best_path, node.node_id == best_node_id, context)

    def build(node: Node, tree: Tree) -> None:
        for child in wm.children(node.node_id, include_pruned=True):
            if max_depth is not None and wm.depth(child.node_id) - base_depth > max_depth:
                continue
            if keep is not None and child.node_id not in keep:
                continue
            style = "bold magenta" if child.node_id in best_path else ""
            build(child, tree.add(label(child), guide_style=style or "dim"))

    top = Tree(label(start))
    build(start, top)
    return top


def family_table(wm: WorldModel) -> Table:
    """Per kernel family: its best measured kernel, where it is, and the cycles spent on it."""
    t = Table(title="families")
    for col in ("family", "best score", "mean latency ms", "best node", "closed", "attempts"):
        t.add_column(col)
    for fam in families(wm):
        sub = [wm.node(n) for n in nx.descendants(wm.graph, fam.node_id) | {fam.node_id}]
        scored = [n for n in sub if n.solution and n.solution.score is not None]
        best = max(scored, key=lambda n: n.solution.score) if scored else None
        t.add_row(fam.choice or fam.node_id,
                  f"{best.solution.score:.4g}x" if best else "-",
                  f"{best.solution.latency_ms:.4g}" if best and best.solution.latency_ms else "-",
                  best.node_id if best else "-", str(sum(1 for n in sub if n.is_closed)),
                  str(sum(n.attempts for n in sub)))
    return t


def show_run(history: RunHistory, console: Console, *, node_id: str | None = None, depth: int | None = None,
             statuses: set[str] | None = None) -> None:
    """The tree (or the subtree under `node_id`), the family table, and the kernel summary."""
    wm = history.world_model()
    if wm is None:
        raise NotARunError(f"{history.run_dir}: the run has not built its world model yet (no tree record); "
                           f"try again in a moment, or `ksearch show --live {history.run_dir}`")
    best = history.best
    if node_id and node_id not in wm:
        raise KeyError(f"no node {node_id!r} in this run; node ids are shown in `ksearch show RUN_DIR`")
    console.print(render_tree(wm, root_id=node_id, max_depth=depth, best_node_id=best.node_id if best else None,
                              statuses=statuses))
    if node_id is None and statuses is None:     # the whole run, unfiltered: add the per-family view
        console.print(family_table(wm))
    if wm.kernel_summary and node_id is None:
        console.print(Text(wm.kernel_summary, style="dim"))


def run_summary(history: RunHistory) -> Text:
    """One line: evaluations, best, stop reason (or that the run is unfinished), cost and time."""
    best = history.best
    t = Text(f"{len(history.evaluations)} evaluations in {history.rounds} rounds on {history.device}; ")
    t.append(f"best {best.score:.4g}x at {best.node_id} (round {best.round})" if best else "no passing kernel yet",
             style="bold" if best else "red")
    t.append(f"; {writer_status(history)}")
    u = history.usage
    t.append(f"; {u.requests} model requests, ${u.cost_usd:.4f}, {u.total_tokens} tokens", style="dim")
    if history.wall_s is not None:
        t.append(f"; {format_duration(history.wall_s)} wall", style="dim")
    return t


def writer_status(history: RunHistory) -> str:
    """Running (who), finished (why), or stopped without finishing (and the command that continues it)."""
    holder = history.writer.holder
    if history.state == "running":
        return f"running ({holder.describe()})" if holder else "running"
    if history.state == "finished":
        return f"finished: {history.stop_reason}"
    last = f"; last writer pid {holder.pid}" if holder and holder.pid is not None else ""
    final = history.records[-1] if history.records else {}
    why = (f"a model request failed: {' '.join(str(final.get('error') or '?').split())[:160]}"
           if final.get("kind") == "model_failed" else "killed or crashed")
    return f"stopped without finishing ({why}{last}): `ksearch resume {history.run_dir}` continues it"


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.2f}h"
