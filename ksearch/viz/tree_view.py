"""`ksearch show`: the plan tree at a glance, one line per node at any width, best path highlighted.

Each node is one line: its short id (store/short_ids.py), the step cut to fit, its status, and three
numbers (viz/node_rows.py). Subtrees off the best path fold into one counted line when the tree would
be longer than a screen; `--node ID` shows any node, its subtree and everything known about it.
"""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ksearch.store.best_manifest import BestKind, BestManifest, manifest_from_history
from ksearch.store.history import NotARunError, RunHistory
from ksearch.store.records import ModelFailed
from ksearch.store.short_ids import ShortIds
from ksearch.viz.node_rows import NodeRow, best_mark, node_rows, node_title, pred_meas, speedup
from ksearch.viz.width import terminal_width  # noqa: F401 - part of this module's API (cli, tests)
from ksearch.world_model import Node, WorldModel
from ksearch.world_model.facts import families, measured_score
from ksearch.world_model.node import NodeStatus

#: Node.status values, for `ksearch show --status`.
STATUS_STYLE = {NodeStatus.closed: "green", NodeStatus.open: "cyan", NodeStatus.failed: "red",
                NodeStatus.pruned: "dim", NodeStatus.decision: "white"}
#: Widths of the right-hand columns: status, score vs baseline, vs parent, predicted -> measured.
_COLS = (("status", 6), ("vs base", 9), ("vs par", 7), ("pred->meas", 14))
_RIGHT = sum(w for _, w in _COLS) + len(_COLS)      # one space before each column
#: Folding keeps the tree to about this many lines unless `max_rows` says otherwise (None: never fold).
DEFAULT_MAX_ROWS = 50


def render_tree(wm: WorldModel, *, root_id: str | None = None, max_depth: int | None = None,
                best: BestManifest | str | None = None, statuses: set[str] | None = None,
                ids: ShortIds | None = None, width: int = 100, max_rows: int | None = None) -> Text:
    """The tree from `root_id` down `max_depth` levels, one line per node, no line wider than `width`.

    `best`: the run's best (its manifest; a node id alone marks that node's kernel): its node is marked
    `*` with the best's score, or, for a shape dispatch, each member's node `+`; their paths are heavy.

    With `statuses`, only nodes in one of them are drawn, with their ancestors (dimmed) so each keeps its
    place in the plan. With `max_rows`, subtrees off the best path are folded from the deepest level up
    until the tree fits; a folded subtree is one line that counts what it holds."""
    ids = ids if ids is not None else ShortIds.from_world_model(wm)
    rows = node_rows(wm, ids, best)
    start = wm.node(root_id) if root_id else wm.root
    base_depth = wm.depth(start.node_id)
    keep: set[str] | None = None
    if statuses is not None:
        keep = set()
        for n in wm.nodes():
            if n.status in statuses:
                keep.update(p.node_id for p in wm.path(n.node_id))

    def kids(node_id: str) -> list[Node]:
        out = []
        for child in wm.children(node_id, include_pruned=True):
            if max_depth is not None and wm.depth(child.node_id) - base_depth > max_depth:
                continue
            if keep is not None and child.node_id not in keep:
                continue
            out.append(child)
        return out

    tree_depth = max(rows[n].depth - base_depth for n in nx.descendants(wm.graph, start.node_id) | {start.node_id})
    fold = None
    if max_rows is not None:
        fold = tree_depth + 1
        while fold > 1 and len(_lines(wm, rows, start, kids, fold, base_depth)) > max_rows:
            fold -= 1
    lines = _lines(wm, rows, start, kids, fold, base_depth)
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append_text(_header(width))
    for prefix, row, folded, context in lines:
        out.append("\n")
        if row is None:
            hidden = [rows[n] for n in folded]
            parent = hidden[0].parent_id
            assert parent is not None               # only children are folded
            out.append_text(_fold_line(prefix, hidden, width, rows[parent].short))
        else:
            out.append_text(_row_line(prefix, rows[row], width, context=context or
                                      (statuses is not None and rows[row].status not in statuses)))
    return out


def _lines(wm: WorldModel, rows: dict[str, NodeRow], start: Node, kids: Callable[[str], list[Node]], fold: int | None,
           base_depth: int) -> list[tuple[str, str | None, list[str], bool]]:
    """(guide prefix, node id or None for a fold line, nodes folded, context) in drawing order."""
    out: list[tuple[str, str | None, list[str], bool]] = [("", start.node_id, [], False)]

    def walk(node_id: str, indent: str) -> None:
        children = kids(node_id)
        row = rows[node_id]
        depth = row.depth - base_depth
        if fold is not None and depth >= fold and not row.on_best_path and children:
            hidden = [d for c in children for d in _subtree(c.node_id, kids)]
            out.append((indent + "└─", None, hidden, False))
            return
        for i, child in enumerate(children):
            last = i == len(children) - 1
            branch = ("┗━" if last else "┣━") if rows[child.node_id].on_best_path else ("└─" if last else "├─")
            out.append((indent + branch, child.node_id, [], False))
            # the guide down to a later sibling on the best path is drawn heavy
            through = any(rows[c.node_id].on_best_path for c in children[i + 1:])
            walk(child.node_id, indent + ("  " if last else ("┃ " if through else "│ ")))

    walk(start.node_id, "")
    return out


def _subtree(node_id: str, kids: Callable[[str], list[Node]]) -> list[str]:
    """`node_id` and everything below it that the filters and the depth limit let through."""
    return [node_id] + [d for c in kids(node_id) for d in _subtree(c.node_id, kids)]


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else (text[:max(0, width - 1)] + "…" if width > 0 else "")


def _header(width: int) -> Text:
    t = Text(_fit("node  step", width - _RIGHT).ljust(width - _RIGHT), style="dim")
    for name, w in _COLS:
        t.append(" " + name.rjust(w), style="dim")
    return t


def _row_line(prefix: str, row: NodeRow, width: int, *, context: bool) -> Text:
    left = width - _RIGHT
    if len(prefix) > left // 2:       # very deep: keep the innermost guides
        prefix = "…" + prefix[-(left // 2 - 1):]
    t = Text(style="dim" if context or row.status == NodeStatus.pruned else "")
    guide_style = "bold magenta" if row.on_best_path else "dim"
    t.append(prefix + (" " if prefix else ""), style=guide_style)
    t.append(row.short, style="bold magenta" if row.on_best_path else "bold")
    title_room = left - len(prefix) - (1 if prefix else 0) - len(row.short) - 1
    title = best_mark(row) + row.title
    t.append(" " + _fit(title, title_room).ljust(max(0, title_room)),
             style="bold" if row.is_best else ("" if not row.is_family else "italic"))
    status = "best" if row.is_best else ("-" if row.status == NodeStatus.decision else row.status)
    t.append(" " + status.rjust(_COLS[0][1]), style="bold magenta" if row.is_best else STATUS_STYLE.get(row.status, ""))
    t.append(" " + speedup(row.score).rjust(_COLS[1][1]), style="green" if row.score is not None else "dim")
    vp = row.vs_parent
    t.append(" " + speedup(vp).rjust(_COLS[2][1]),
             style="dim" if vp is None else ("green" if vp >= 1 else "yellow"))
    pm = pred_meas(row)
    t.append(" " + _fit(pm, _COLS[3][1]).rjust(_COLS[3][1]), style="dim" if row.measured is None else "")
    return t


def _fold_line(prefix: str, hidden: list[NodeRow], width: int, under: str) -> Text:
    """`└─ … 7 more (3 closed, 3 open, 1 failed)`: a folded subtree, counted by status."""
    counts: dict[str, int] = {}
    for r in hidden:
        counts[r.status] = counts.get(r.status, 0) + 1
    parts = ", ".join(f"{counts[s]} {s}" for s in NodeStatus if counts.get(s))
    best = max((r.score for r in hidden if r.score is not None), default=None)
    text = (f"{prefix} … {len(hidden)} more ({parts}" + (f"; best {speedup(best)}" if best is not None else "")
            + f"): --node {under}")
    return Text(_fit(text, width), style="dim")


def legend(history: RunHistory | None, width: int, best: BestManifest | None = None) -> Text:
    """What the columns and marks mean, in two lines (three with a best; one more when the baseline was reused
    from the baseline cache, so where it came from is not cut off)."""
    against = history.baseline.described() if history and history.baseline else "the baseline"
    parent = "vs par: against the parent's kernel (-: it has none)"
    reused = bool(history and history.baseline and history.baseline.provenance())
    lines = [f"vs base: against {against}", parent] if reused else [f"vs base: against {against}; {parent}"]
    lines.append("pred->meas: predicted -> measured over the parent's kernel (family: over the baseline); ━ best path")
    if best is not None:
        lines.append(f"best/ holds the {best.describe()}: {best.score:.4g}x" if best.kind is BestKind.KERNEL else
                     f"best/ holds a shape dispatch ({best.score:.4g}x) over the kernels of the nodes marked +")
    return Text("\n".join(_fit(line, width) for line in lines), style="dim", no_wrap=True)


def family_table(wm: WorldModel, ids: ShortIds | None = None, width: int | None = None,
                 best: BestManifest | None = None, best_ms: float | None = None) -> Table:
    """Per kernel family: its top measured node (short id: never cut), the cycles spent; then the run's
    best (what best/ holds), the one row that says "best"."""
    ids = ids if ids is not None else ShortIds.from_world_model(wm)
    ids.covering(wm)
    t = Table(title="families", width=width, title_justify="left")
    t.add_column("family", no_wrap=True, overflow="ellipsis", ratio=1)
    for col in ("top score", "mean ms", "top node", "closed", "attempts"):
        t.add_column(col, no_wrap=True, justify="right")
    for fam in families(wm):
        sub = [wm.node(n) for n in nx.descendants(wm.graph, fam.node_id) | {fam.node_id}]
        scored = [n for n in sub if measured_score(n) is not None]
        top = max(scored, key=lambda n: measured_score(n) or 0.0) if scored else None
        sol = top.solution if top else None         # measured, so attached
        t.add_row(f"{ids.short(fam.node_id)} {node_title(fam)}",
                  f"{sol.score:.4g}x" if sol else "-",
                  f"{sol.latency_ms:.4g}" if sol and sol.latency_ms else "-",
                  ids.short(top.node_id) if top else "-", str(sum(1 for n in sub if n.is_closed)),
                  str(sum(n.attempts for n in sub)))
    if best is not None:
        what = "kernel" if best.kind is BestKind.KERNEL else "shape dispatch"
        t.add_section()
        t.add_row(Text(f"* best: {what} of {' + '.join(best.short_ids)}", style="bold"),
                  Text(f"{best.score:.4g}x", style="bold"), f"{best_ms:.4g}" if best_ms else "-",
                  " ".join(best.short_ids), "", "")
    return t


def best_mean_ms(history: RunHistory) -> float | None:
    """Mean latency over the workloads of the measurement the best was chosen on."""
    report = history.best_report()
    lat = [w.latency_ms for w in report.workloads if w.latency_ms] if report else []
    return sum(lat) / len(lat) if lat else None


def show_run(history: RunHistory, console: Console, *, node_id: str | None = None, depth: int | None = None,
             statuses: set[str] | None = None, width: int = 100, max_rows: int | None = DEFAULT_MAX_ROWS) -> None:
    """The tree (or the subtree under `node_id`, short or full id), the family table, the kernel summary."""
    wm = history.world_model()
    if wm is None:
        raise NotARunError(no_tree_message(history))
    ids = ShortIds.from_history(history).covering(wm)
    best = manifest_from_history(history, ids)
    if node_id:
        node_id = ids.resolve(node_id, wm)
    console.print(render_tree(wm, root_id=node_id, max_depth=depth, best=best, statuses=statuses, ids=ids,
                              width=width, max_rows=max_rows))
    console.print(legend(history, width, best))
    if node_id is None and statuses is None:     # the whole run, unfiltered: add the per-family view
        console.print(family_table(wm, ids, width, best, best_mean_ms(history)))
    if wm.kernel_summary and node_id is None:
        console.print(Text(wm.kernel_summary, style="dim"))


def no_tree_message(history: RunHistory) -> str:
    """Why a run has no tree to draw: it is starting (try again), or it died before building one (it never will)."""
    if history.live:
        return (f"{history.run_dir}: the run has not built its world model yet (no tree record); try again in a "
                f"moment, or `ksearch show --live {history.run_dir}`")
    return f"{history.run_dir}: the run died before it built its world model; {writer_status(history)}"


def run_summary(history: RunHistory) -> Text:
    """One line: evaluations, best (what best/ holds: score, kernel or dispatch, where it was found), stop
    reason (or that the run is unfinished), cost and time."""
    best = manifest_from_history(history)
    t = Text(f"{len(history.evaluations)} evaluations in {history.rounds} rounds on {history.device}; ")
    t.append(f"best {best.score:.4g}x: {best.describe()}" if best else "no passing kernel yet",
             style="bold" if best else "red")
    if best is not None:
        t.append(f" ({found_at(history, best)})")
    t.append(f"; {writer_status(history)}")
    u = history.usage
    t.append(f"; {u.requests} model requests, ${u.cost_usd:.4f}, {u.total_tokens} tokens", style="dim")
    if history.wall_s is not None:
        t.append(f"; {format_duration(history.wall_s)} wall", style="dim")
    return t


def found_at(history: RunHistory, best: BestManifest) -> str:
    """'round 8, evaluation 8 of 13': where the run found (a dispatch: composed and measured) its best."""
    k = history.evaluation_number(best.solution_id, best.round)
    return f"round {best.round}" + (f", evaluation {k} of {len(history.evaluations)}" if k else "")


def writer_status(history: RunHistory) -> str:
    """Running (who), finished (why), or stopped without finishing (and the command that continues it)."""
    holder = history.writer.holder
    if history.state == "running":
        return f"running ({holder.describe()})" if holder else "running"
    if history.state == "finished":
        return f"finished: {history.stop_reason}"
    last = f"; last writer pid {holder.pid}" if holder and holder.pid is not None else ""
    final = history.records[-1] if history.records else None
    why = (f"a model request failed: {' '.join((final.error or '?').split())[:160]}"
           if isinstance(final, ModelFailed) else "killed or crashed")
    return f"stopped without finishing ({why}{last}): `ksearch resume {history.run_dir}` continues it"


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.2f}h"
