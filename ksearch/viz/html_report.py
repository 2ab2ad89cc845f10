"""`ksearch report RUN_DIR --html`: the run in one self-contained HTML file, to attach to a pull request.

Everything is inside the file: the CSS and the few lines of script, the plots as base64 PNGs, the plan
tree as nested <details> (collapsible with no script at all), and every kernel the run evaluated,
highlighted by pygments, with each closed node's diff against its parent's kernel. No server, no
network: the file references nothing outside itself.
"""

from __future__ import annotations

import base64
import html
import tempfile
import time
from pathlib import Path

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CppLexer, DiffLexer, PythonLexer

from ksearch.store.best_manifest import BestManifest, manifest_from_history
from ksearch.store.history import RunHistory
from ksearch.store.short_ids import ShortIds
from ksearch.viz import plots
from ksearch.viz.node_rows import NodeRow, node_rows, pred_meas, speedup
from ksearch.viz.node_view import kernel_diff
from ksearch.viz.speedups import prediction_points
from ksearch.viz.tree_view import format_duration, run_summary
from ksearch.world_model import WorldModel

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto; max-width: 1100px;
       padding: 0 1em; color: #1f2328; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #d0d7de; }
code, pre, .tree { font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.meta td { padding: 0 1em 0 0; vertical-align: top; } .meta td:first-child { color: #59636e; }
.tree details { margin-left: 1.4em; } .tree > details { margin-left: 0; }
.tree summary { cursor: pointer; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.tree .leaf { margin-left: 1.4em; padding-left: 1.1em; white-space: nowrap; }
.id { font-weight: bold; } .best-path > summary .id, .best-path.leaf .id { color: #8250df; }
.is-best { background: #fbefff; } .num { color: #59636e; }
.closed { color: #1a7f37; } .open { color: #0969da; } .failed { color: #cf222e; } .pruned { color: #8c959f; }
.decision { color: #59636e; }
img { max-width: 100%; border: 1px solid #d0d7de; margin: .5em 0; }
.kernel { margin: .6em 0; } .kernel > summary { cursor: pointer; }
.hl pre { padding: .6em; overflow-x: auto; background: #f6f8fa; border-radius: 6px; }
.controls button { font: inherit; margin-right: .5em; }
.legend { color: #59636e; font-size: 12.5px; }
"""

_SCRIPT = """
function setAll(open) { document.querySelectorAll('.tree details').forEach(d => d.open = open); }
"""


def write_html_report(history: RunHistory, out_dir: Path | None = None) -> Path:
    """Write report.html into `out_dir` (default RUN_DIR/report/); returns its path."""
    out = Path(out_dir) if out_dir is not None else history.run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.html"
    path.write_text(render_html(history), encoding="utf-8")
    return path


def render_html(history: RunHistory) -> str:
    wm = history.world_model()
    ids = ShortIds.from_history(history)
    best = manifest_from_history(history, ids)
    rows = node_rows(wm, ids, best) if wm is not None else {}
    parts = [_header(history), _plots(history, wm, ids)]
    if wm is not None:
        parts.append(_tree(wm, rows, history))
    parts.append(_kernels(history, wm, rows, best))
    body = "\n".join(p for p in parts if p)
    style = _CSS + HtmlFormatter(cssclass="hl").get_style_defs(".hl")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f"<title>ksearch run {html.escape(history.task)}</title>\n<style>{style}</style>\n"
            f"<script>{_SCRIPT}</script>\n</head><body>\n{body}\n</body></html>\n")


# ---- sections ------------------------------------------------------------------------------------------
def _header(h: RunHistory) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(h.started_at)) if h.started_at else "?"
    fork = h.forked_from
    rows = [("run", f"<code>{_e(h.run_dir)}</code> (started {when})"),
            ("device / workloads", f"{_e(h.device)} / {_e(h.workload_set)}"),
            ("model / policy / seed", f"{_e(h.model)} / {_e(h.policy)} / {_e(h.seed)}"),
            ("baseline", _e(h.baseline.described() if h.baseline else "not measured yet")),
            ("status", _e(f"stopped: {h.stop_reason}" if h.ended else "not finished (in progress or killed)")),
            ("wall clock", _e(format_duration(h.wall_s)))]
    if fork:
        rows.append(("forked from", f"<code>{_e(fork['from'])}</code> at node <code>{_e(fork['node'])}</code>"))
    table = "".join(f"<tr><td>{k}</td><td>{v}</td></tr>" for k, v in rows)
    return (f"<h1>ksearch run report: {_e(h.task)}</h1>\n<table class=\"meta\">{table}</table>\n"
            f"<p>{_e(run_summary(h).plain)}</p>")


def _plots(h: RunHistory, wm: WorldModel | None, ids: ShortIds) -> str:
    report = h.best_report()
    with tempfile.TemporaryDirectory(prefix="ksearch-html-") as tmp:     # never inside the run directory
        tmp_dir = Path(tmp)
        pngs = [("best score against round", plots.plot_best_by_round(h, tmp_dir / "best.png")),
                ("predicted vs measured speedup, per node",
                 plots.plot_predictions(prediction_points(wm) if wm is not None else [], tmp_dir / "pred.png",
                                        "predicted vs measured speedup, per node", labels=ids.by_full)),
                ("best kernel per workload", plots.plot_workload_speedups(report.speedups if report else {},
                                                                        tmp_dir / "work.png",
                                                                        "best kernel per workload"))]
        imgs = [f"<img alt=\"{_e(alt)}\" src=\"data:image/png;base64,"
                f"{base64.b64encode(p.read_bytes()).decode('ascii')}\">" for alt, p in pngs if p is not None]
    return "<h2>Plots</h2>\n" + "\n".join(imgs) if imgs else ""


def _tree(wm: WorldModel, rows: dict[str, NodeRow], h: RunHistory) -> str:
    against = h.baseline.label if h.baseline else "the baseline"

    def node_html(node_id: str) -> str:
        row = rows[node_id]
        children = wm.children(node_id, include_pruned=True)
        classes = " ".join(c for c in ("best-path" if row.on_best_path else "", "is-best" if row.is_best else "") if c)
        ident = f"<span class=\"id\">{_e(row.short)}</span>"
        if h.evaluations_of(node_id):                    # its kernels are listed below
            ident = f"<a href=\"#k-{_e(row.short)}\">{ident}</a>"
        line = (f"{ident} "
                f"{'&#9733; ' if row.is_best else ('+ ' if row.in_best else '')}{_e(row.title)} "
                f"<span class=\"{row.status}\">[{row.status}]</span> "
                f"<span class=\"num\">score {speedup(row.score)} &middot; vs parent {speedup(row.vs_parent)} "
                f"&middot; pred-&gt;meas {_e(pred_meas(row))}</span>")
        title = f" title=\"{_e(node_id)}\""
        if not children:
            return f"<div class=\"leaf {classes}\"{title}>{line}</div>"
        inner = "\n".join(node_html(c.node_id) for c in children)
        opened = " open" if row.on_best_path or row.depth < 2 else ""
        return f"<details class=\"{classes}\"{opened}{title}><summary>{line}</summary>\n{inner}\n</details>"

    return ("<h2>Plan tree</h2>\n<p class=\"controls\"><button onclick=\"setAll(true)\">expand all</button>"
            "<button onclick=\"setAll(false)\">collapse all</button></p>\n"
            f"<p class=\"legend\">score: against {_e(against)}; vs parent: against the kernel the step started "
            "from (- when the parent holds none); pred-&gt;meas: the model's predicted speedup and the measured "
            "one over the parent's kernel (a family: over the baseline). &#9733; marks the node whose kernel "
            "best/ holds (at the best's score); + marks each node whose kernel is in best/ when best/ is a shape "
            "dispatch; hover a node for its full id, click its id for its kernels.</p>\n"
            f"<div class=\"tree\">{node_html(wm.root.node_id)}</div>")


def _kernels(h: RunHistory, wm: WorldModel | None, rows: dict[str, NodeRow], best: BestManifest | None) -> str:
    """Every evaluated kernel, grouped by node in tree order; then any kernel file no evaluation names."""
    in_best = {best.solution_id} | {m.solution_id for m in best.members} if best else set()
    shown: set[str] = set()
    sections = []
    order = [n.node_id for n in wm.nodes()] if wm is not None else []
    order += sorted({e.node_id for e in h.evaluations} - set(order))
    for node_id in order:
        evals = h.evaluations_of(node_id)
        if not evals:
            continue
        row = rows.get(node_id)
        short = row.short if row else node_id
        node = wm.node(node_id) if wm is not None and node_id in wm else None
        attached = node.solution.solution_id if node and node.solution else None
        blocks = []
        for e in evals:
            if e.solution_id in shown:
                continue
            shown.add(e.solution_id)
            src = h.solution_source(e.solution_id)
            head = (f"{_e(e.solution_id)} &middot; round {e.round}, attempt {e.attempt} &middot; "
                    f"{_e(e.report.status)}" + (f" &middot; {speedup(e.score)}" if e.score is not None else "")
                    + (" &middot; <b>attached</b>" if e.solution_id == attached else "")
                    + (" &middot; <b>in best/</b>" if e.solution_id in in_best else ""))
            blocks.append(_code_block(head, src, h.solution_language(e.solution_id), opened=e.solution_id == attached))
            if e.solution_id == attached and node is not None and wm is not None:
                base_sid, diff = kernel_diff(h, wm, node, e.solution_id)
                if diff is not None:
                    blocks.append(_code_block(f"diff against the parent's kernel {_e(base_sid)}",
                                              diff or "(identical to the parent's kernel)\n", "diff"))
        if blocks:
            title = _e(row.title) if row else ("shape dispatch over the regions' best kernels"
                                               if node_id == "dispatch" else "")
            sections.append(f"<h3 id=\"k-{_e(short)}\">{_e(short)} {title} <code>{_e(node_id)}</code></h3>\n"
                            + "\n".join(blocks))
    solutions = h.run_dir / "solutions"
    others = sorted(p for p in solutions.glob("*") if p.suffix in (".py", ".cu") and p.stem not in shown) \
        if solutions.is_dir() else []
    if others:
        sections.append("<h3>kernels no evaluation names</h3>\n" + "\n".join(
            _code_block(_e(p.name), p.read_text(errors="replace"), "cuda" if p.suffix == ".cu" else "python")
            for p in others))
    if not sections:
        return "<h2>Kernels</h2>\n<p>No kernel was evaluated yet.</p>"
    return "<h2>Kernels</h2>\n" + "\n".join(sections)


def _code_block(head: str, source: str | None, language: str, opened: bool = False) -> str:
    if source is None:
        return f"<p>{head}: the source file is missing from solutions/</p>"
    lexer = {"python": PythonLexer, "cuda": CppLexer, "diff": DiffLexer}.get(language, PythonLexer)()
    code = highlight(source, lexer, HtmlFormatter(cssclass="hl"))
    return f"<details class=\"kernel\"{' open' if opened else ''}><summary>{head}</summary>\n{code}</details>"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)
