"""`ksearch show RUN_DIR --node ID`: one node's plan, kernel, diff against its parent, and measurements.

Everything here comes from the run's history (journal + solutions/), so it also works on a run that is
still going or was killed.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from ksearch.eval.report import EvalReport, Status
from ksearch.profile import read_profile, render_profile
from ksearch.store.best_manifest import BestKind, BestManifest, manifest_from_history
from ksearch.store.history import RunHistory
from ksearch.store.records import CycleFailed, Evaluation
from ksearch.store.short_ids import ShortIds
from ksearch.world_model import Node, WorldModel
from ksearch.world_model.facts import facts

#: What ends a code line cut to the terminal's width.
CUT_MARK = "…"


def render_node(history: RunHistory, node_id: str, width: int | None = None) -> Group:
    """Everything about one node (full or short id), top to bottom; code lines longer than `width` are cut
    and end in CUT_MARK (the panel says how many and where the whole file is)."""
    return Group(*node_sections(history, node_id, width=width).values())


def node_sections(history: RunHistory, node_id: str, *, wm: WorldModel | None = None,
                  ids: ShortIds | None = None, width: int | None = None) -> dict[str, RenderableType]:
    """One node in sections, for views that show them side by side or in tabs: plan (with the model's
    notes), attempts (with the per-workload table), kernel, diff (against the parent's kernel). With
    `width`, kernel and diff lines that do not fit are cut visibly (see render_node)."""
    wm = wm if wm is not None else history.world_model()
    if wm is None:
        raise KeyError(f"{history.run_dir}: the run has no world model yet, so it has no node {node_id!r}")
    ids = (ids if ids is not None else ShortIds.from_history(history)).covering(wm)
    node = wm.node(ids.resolve(node_id, wm))
    shown = shown_evaluation(history, node)
    best = manifest_from_history(history, ids)
    plan: list[RenderableType] = [_plan(wm, node, ids, best)]
    if node.notes:
        plan.append(Panel(Text(node.notes), title="model's notes", title_align="left", border_style="dim"))
    attempts: list[RenderableType] = [_attempts(history, node, best)]
    if shown is not None:
        attempts.append(_workloads(history, shown))
    kernel, diff = _kernel_and_diff(history, wm, node, shown, width)
    return {"plan": Group(*plan), "attempts": Group(*attempts), "kernel": kernel, "diff": diff}


def shown_evaluation(history: RunHistory, node: Node) -> Evaluation | None:
    """The attached solution's evaluation; for a node without one, its last attempt."""
    attempts = history.evaluations_of(node.node_id)
    if node.solution:
        # The same kernel can be evaluated under several nodes; this node's own evaluation comes first.
        mine = [e for e in attempts if e.solution_id == node.solution.solution_id]
        return mine[-1] if mine else history.evaluation_of(node.solution.solution_id, node.solution.round_index)
    return attempts[-1] if attempts else None


def _plan(wm: WorldModel, node: Node, ids: ShortIds, best: BestManifest | None = None) -> Panel:
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    t.add_row("path", " > ".join(ids.short(n.node_id) for n in wm.path(node.node_id)))
    t.add_row("full id", node.node_id)
    in_best = best_role(best, node.node_id)
    if in_best:
        t.add_row("best", Text(in_best, style="bold magenta"))
    t.add_row("status", f"{node.status}" + (" (retired after failed cycles)" if node.retired else ""))
    t.add_row("decision", node.decision or "-")
    t.add_row("choice", node.choice or "-")
    t.add_row("rating", f"{node.rating:.3g} / 10")
    t.add_row("confidence", f"{node.confidence:.2f}")
    if node.impacts:
        t.add_row("impacts", ", ".join(f"{k} {v:g}" for k, v in node.impacts.items()))
    t.add_row("created", f"round {node.created_round}; {node.attempts} attempts, {node.failed_cycles} failed cycles")
    a = node.action
    if a is not None:
        t.add_row("action", Text(a.title, style="bold"))
        if a.description:
            t.add_row("", a.description)
        if a.rationale:
            t.add_row("why", a.rationale)
        t.add_row("difficulty", f"{a.difficulty}   priority {a.score:.2f}")
        f = facts(wm, node)
        pred = f"{f.predicted:.3g}x" if f.predicted is not None else "-"
        if f.against_baseline:
            t.add_row("vs baseline", f"predicted {pred}, measured " + (f"{f.measured:.3g}x (the parent is the root, "
                                                                         f"which holds no kernel)"
                                                                         if f.measured is not None else "-"))
        else:
            t.add_row("vs parent", f"predicted {pred}, measured " + (f"{f.measured:.3g}x (score {f.score:.4g} / "
                                                                     f"parent {f.parent_score:.4g})"
                                                                     if f.measured is not None else "-"))
        if a.params:
            t.add_row("params", json.dumps(a.params, sort_keys=True))
    if node.solution:
        s = node.solution
        t.add_row("solution", f"{s.solution_id} (attached in round {s.round_index}, {s.status}"
                  + (f", {s.score_name} {s.score:.4g}x" if s.score is not None else "") + ")")
    return Panel(t, title=f"node {ids.short(node.node_id)}: {node.step}", title_align="left")


def best_role(best: BestManifest | None, node_id: str) -> str:
    """What best/ holds of this node's work, in a sentence; '' when nothing."""
    if best is None:
        return ""
    mine = [m for m in best.members if m.node_id == node_id]
    if not mine:
        return ""
    if best.kind is BestKind.KERNEL:
        return (f"best/ holds this node's kernel {best.solution_id}: {best.score:.4g}x, the run's best "
                f"(round {best.round})")
    return (f"best/ is a shape dispatch ({best.score:.4g}x); this node's kernel "
            + "; ".join(f"{m.solution_id} serves {m.serves() or 'no region'}" for m in mine))


def _attempts(history: RunHistory, node: Node, best: BestManifest | None = None) -> RenderableType:
    evals = history.evaluations_of(node.node_id)
    failed = [r for r in history.of(CycleFailed) if r.node_id == node.node_id]
    if not evals:
        return Text("no attempts yet" if not node.is_root else "the root holds no kernel unless "
                    "search.seed_solution was given", style="dim")
    t = Table(title=f"attempts ({len(evals)}; {len(failed)} failed cycles)", title_justify="left")
    for col in ("round", "attempt", "solution", "status", "score", "eval s"):
        t.add_column(col)
    attached = node.solution.solution_id if node.solution else None
    in_best = {m.solution_id for m in best.members if m.node_id == node.node_id} if best else set()
    for e in evals:
        style = "bold green" if e.solution_id == attached else ("" if e.passed else "red")
        marks = [m for m, on in (("attached", e.solution_id == attached), ("in best/", e.solution_id in in_best)) if on]
        t.add_row(str(e.round), str(e.attempt), e.solution_id + (f" ({', '.join(marks)})" if marks else ""),
                  e.report.status, f"{e.score:.4g}x" if e.score is not None else "-",
                  f"{e.report.elapsed_s:.1f}", style=style)
    return t


def _workloads(history: RunHistory, e: Evaluation) -> RenderableType:
    r = e.report
    base = history.baseline.best() if history.baseline else {}
    base_spread = history.baseline.best_spread() if history.baseline else {}
    t = Table(title=f"evaluation of {e.solution_id} (round {e.round}) on {r.device}: {r.summary()}",
              title_justify="left")
    for col in ("workload", "status", "latency ms", "baseline ms", "speedup", "max abs err", "max rel err", "message"):
        t.add_column(col)
    for w in r.workloads:
        sp = r.speedups.get(w.workload)
        if getattr(w, "baseline_ms", None):                 # interleaved with the kernel (GPU)
            baseline = _fmt(w.baseline_ms) + _spread(getattr(w, "baseline_spread", None))
        else:                                               # the run's baseline measurement
            baseline = _fmt(base.get(w.workload)) + _spread(base_spread.get(w.workload))
        t.add_row(w.workload, Text(w.status, style="green" if w.status == Status.PASSED else "red"),
                  _fmt(w.latency_ms) + _spread(getattr(w, "spread", None)), baseline, f"{sp:.3g}x" if sp else "-",
                  _fmt(w.max_abs_error, ".3g"), _fmt(w.max_rel_error, ".3g"), Text(w.message[:200]))
    parts: list[RenderableType] = [t]
    if r.baseline:
        parts.append(Text(f"baseline: {r.baseline}", style="dim"))
    for flag in getattr(r, "flags", None) or []:      # suspicious findings that did not fail the kernel
        parts.append(Text(f"flag: {flag}", style="yellow"))
    profile = _profile(r)
    if profile is not None:
        parts.append(profile)
    if r.log and not r.passed:
        parts.append(Panel(Text(r.log[-3000:]), title="error log (tail)", title_align="left", border_style="red"))
    return Group(*parts)


def _profile(r: EvalReport) -> RenderableType | None:
    """What the hardware said about the kernel (ksearch.profile's table), or one line saying why nothing;
    nothing at all for records written before evaluations said either, so old runs show as they did."""
    raw, note = getattr(r, "profile", None), getattr(r, "profile_note", "") or ""
    if raw is None and not note:
        return None
    reading = read_profile({"profile": raw, "profile_note": note, "device": r.device})
    if reading.profile is None:
        return Text(f"profile: {render_profile(reading)}", style="dim")
    body = render_profile(reading) + (f"\nnote: {note}" if note else "")
    return Panel(Text(body), title="profile (what the GPU said; advice, never a score)", title_align="left",
                 border_style="cyan")


def _kernel_and_diff(history: RunHistory, wm: WorldModel, node: Node, shown: Evaluation | None,
                     width: int | None = None) -> tuple[RenderableType, RenderableType]:
    if shown is None:
        none = Text("no kernel: this node has no attempt yet", style="dim")
        return none, none
    sid = shown.solution_id
    src = history.solution_source(sid)
    if src is None:
        missing = Text(f"no kernel source to show (solutions/{sid}.py is missing)", style="dim")
        return missing, missing
    lang = history.solution_language(sid)
    label = "attached kernel" if node.solution and node.solution.solution_id == sid else "last attempt's kernel"
    suffix = ".cu" if lang == "cuda" else ".py"
    gutter = len(str(len(src.splitlines()))) + 3      # rich's line numbers: digits, then padding and a rule
    shown_src, cut = cut_lines(src, None if width is None else width - _PANEL_EDGES - gutter)
    kernel = _with_note(Panel(Syntax(shown_src, lang, line_numbers=True, word_wrap=False), title=f"{label} {sid}",
                              title_align="left"), _cut_note(cut, history.run_dir / "solutions" / f"{sid}{suffix}"))
    base_sid, diff = kernel_diff(history, wm, node, sid)
    if diff is None:
        baseline = history.baseline.label if history.baseline else "the baseline"
        return kernel, Text(f"no parent kernel to diff against: the parent is the root, whose kernel is {baseline}",
                            style="dim")
    shown_diff, cut = cut_lines(diff or "(identical to the parent's kernel)\n",
                                None if width is None else width - _PANEL_EDGES)
    return kernel, _with_note(Panel(Syntax(shown_diff, "diff", word_wrap=False),
                                    title=f"diff against the parent's kernel {base_sid}", title_align="left"),
                              _cut_note(cut, None))


#: A panel's border and padding, left and right.
_PANEL_EDGES = 4


def cut_lines(text: str, fit: int | None) -> tuple[str, int]:
    """`text` with every line longer than `fit` columns cut to fit, ending in CUT_MARK; and how many were cut."""
    if fit is None or fit < 2:
        return text, 0
    out, cut = [], 0
    for line in text.splitlines():
        line = line.expandtabs()
        if len(line) > fit:
            line, cut = line[:fit - 1] + CUT_MARK, cut + 1
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else ""), cut


def _cut_note(cut: int, whole: Path | None) -> str | None:
    if not cut:
        return None
    where = f"; the whole file: {whole}" if whole is not None else ""
    return f"{cut} line{'s' if cut > 1 else ''} above cut at the width, marked {CUT_MARK} (--width N draws wider){where}"


def _with_note(panel: Panel, note: str | None) -> RenderableType:
    return Group(panel, Text(note, style="dim")) if note else panel


def kernel_diff(history: RunHistory, wm: WorldModel, node: Node, sid: str) -> tuple[str | None, str | None]:
    """(parent's solution id, unified diff from the parent's kernel to `sid`); diff None without a parent kernel."""
    src = history.solution_source(sid) or ""
    base_sid = _parent_solution_id(wm, node)
    base_src = history.solution_source(base_sid)
    if base_src is None:
        return base_sid, None
    return base_sid, "".join(difflib.unified_diff(base_src.splitlines(keepends=True), src.splitlines(keepends=True),
                                                  fromfile=f"parent {base_sid}", tofile=f"{node.node_id} {sid}"))


def _parent_solution_id(wm: WorldModel, node: Node) -> str | None:
    """The kernel this node's cycle started from: recorded on the attachment, else the parent's solution."""
    if node.solution and node.solution.parent_solution_id:
        return node.solution.parent_solution_id
    parent = wm.parent(node.node_id)
    return parent.solution.solution_id if parent and parent.solution else None


def _spread(v: float | None) -> str:
    return f" ±{100 * v:.1f}%" if v else ""


def _fmt(v: float | None, spec: str = ".4g") -> str:
    return format(v, spec) if v is not None else "-"
