"""`ksearch report RUN_DIR`: a self-contained folder (report.md + PNGs) that explains one run.

Markdown because it reads well in a terminal, on GitHub and in a pull request, and needs no server; the
plots sit next to it under relative names so the folder can be copied or attached as it is.
"""

from __future__ import annotations

import time
from pathlib import Path

from ksearch.store import records as R
from ksearch.store.best_manifest import BestKind, manifest_from_history
from ksearch.store.history import RunHistory
from ksearch.store.short_ids import ShortIds
from ksearch.viz import plots
from ksearch.viz.speedups import PredictionPoint, geometric_error, prediction_points
from ksearch.viz.tree_view import format_duration, found_at
from ksearch.world_model import WorldModel
from ksearch.world_model.facts import families, family_of, measured_score


def write_report(history: RunHistory, out_dir: Path | None = None) -> Path:
    """Write report.md and its plots into `out_dir` (default RUN_DIR/report/); returns report.md's path."""
    out = Path(out_dir) if out_dir is not None else history.run_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    wm = history.world_model()
    ids = ShortIds.from_history(history)
    if wm is not None:
        ids.covering(wm)
    points = prediction_points(wm) if wm is not None else []
    best_report = history.best_report()
    speedups = best_report.speedups if best_report else {}

    figs = {
        "best": plots.plot_best_by_round(history, out / "best_by_round.png"),
        "pred": plots.plot_predictions(points, out / "predicted_vs_measured.png",
                                       "predicted vs measured speedup, per node", labels=ids.by_full),
        "workloads": plots.plot_workload_speedups(speedups, out / "workload_speedups.png",
                                                  "best kernel per workload"),
    }
    sections = [_header(history), _result(history, wm, ids, figs["best"]), _workloads(history, figs["workloads"]),
                _predictions(points, ids, wm, figs["pred"]), _narrative(history, wm, ids), _cost(history)]
    path = out / "report.md"
    path.write_text("\n\n".join(s.strip("\n") for s in sections if s) + "\n")
    return path


# ---- sections ------------------------------------------------------------------------------------------
def _header(h: RunHistory) -> str:
    status = f"stopped: {h.stop_reason}" if h.ended else \
        "**not finished** (the run is in progress or was killed; `ksearch resume` continues it)"
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(h.started_at)) if h.started_at else "?"
    fork = h.forked_from
    forked = f"- forked from `{fork['from']}` at node `{fork['node']}`\n" if fork else ""
    return (f"# ksearch run report: {h.task}\n\n"
            f"- run: `{h.run_dir}` (started {when})\n{forked}"
            f"- device: {h.device}, workload set: {h.workload_set}\n"
            f"- model: {h.model}, policy: {h.policy}, seed: {h.seed}\n"
            f"- baseline: {h.baseline.described() if h.baseline else 'not measured yet'}\n"
            f"- {status}\n")


def _result(h: RunHistory, wm: WorldModel | None, ids: ShortIds, best_png: Path | None) -> str:
    lines = ["## Result", ""]
    best = manifest_from_history(h, ids)
    if best is None:
        lines.append(f"No passing kernel in {len(h.evaluations)} evaluations.")
    else:
        b = h.best
        found = format_duration(b.t - h.started_at) if b is not None and b.t is not None and h.started_at else "?"
        report = h.best_report()
        spread = getattr(report, "score_spread", None) if report else None
        noise = f" (±{100 * spread:.1f}% timing spread)" if spread else ""
        lines.append(f"Best: **{best.score:.4g}x**{noise} {best.score_name.replace('_', ' ')} against "
                     f"{best.baseline}: the {_md(best.describe())}. Found in {found_at(h, best)}, {found} into "
                     f"the run; solution `{best.solution_id}` (`best/{best.file}`; `best/manifest.json` says what "
                     f"it is).")
        if best.validate_score is not None:                                               # [shapes] held-out score
            lines.append(f"On the held-out set `{best.validate_set}`: **{best.validate_score:.4g}x**.")
        if best.kind is BestKind.DISPATCH:
            lines += ["", "A shape dispatch is one module whose `run()` reads the input shapes and calls the "
                          "kernel that was fastest on that region of the shape space (the fallback serves shapes "
                          "in no listed region). Its kernels:", ""]
            for m in best.members:
                e = h.evaluation_of(m.solution_id)
                where = f"round {e.round}" if e else "?"
                lines.append(f"- `{m.short_id}` {_md(m.step)}: solution `{m.solution_id}` (found in {where}); "
                             f"serves {_md(m.serves() or 'no region')}")
        if wm is not None:
            for m in best.members:
                if m.node_id in wm:
                    steps = [f"`{ids.short(n.node_id)}` ({_md(n.step)})" for n in wm.path(m.node_id)[1:]]
                    lines += ["", f"Plan that led to {m.short_id}: root -> " + " -> ".join(steps)]
    if best_png:
        lines += ["", f"![best score against round]({best_png.name})"]
    return "\n".join(lines)


def _workloads(h: RunHistory, png: Path | None) -> str:
    if h.best is None:
        return ""
    report = h.best_report()
    if report is None:
        return ""
    base = h.baseline.best() if h.baseline else {}
    base_spread = h.baseline.best_spread() if h.baseline else {}
    rows = ["| workload | status | baseline ms | best kernel ms | speedup |", "|---|---|---:|---:|---:|"]
    for w in report.workloads:
        sp = report.speedups.get(w.workload)
        if getattr(w, "baseline_ms", None):                     # interleaved with the kernel (GPU)
            baseline_ms, spread = w.baseline_ms, getattr(w, "baseline_spread", None)
        else:                                                   # the run's baseline measurement
            baseline_ms, spread = base.get(w.workload), base_spread.get(w.workload)
        rows.append(f"| {_md(w.workload)} | {w.status} | {_f(baseline_ms)}{_pm(spread)} | "
                    f"{_f(w.latency_ms)}{_pm(getattr(w, 'spread', None))} | {f'{sp:.3g}x' if sp else '-'} |")
    text = f"## Best kernel per workload\n\nAgainst {h.baseline.label if h.baseline else 'the baseline'}:\n\n" + \
        "\n".join(rows)
    if png:
        text += f"\n\n![speedup per workload]({png.name})"
    return text


def _predictions(points: list[PredictionPoint], ids: ShortIds, wm: WorldModel | None, png: Path | None) -> str:
    head = ("## Predicted vs measured speedup\n\nPer closed node: the model's `expected_speedup` (predicted "
            "speedup of the node's kernel over its parent's kernel; the root's kernel is the baseline) against "
            "the measured node score / parent score.\n\n")
    if not points:
        return head + "No closed node with a prediction yet."
    err = geometric_error(points)
    over = sum(1 for p in points if p.measured < p.predicted)
    rows = ["| node | step | family | depth | predicted | measured | measured / predicted |",
            "|---|---|---|---:|---:|---:|---:|"]
    for p in points:
        step = wm.node(p.node_id).step if wm is not None and p.node_id in wm else ""
        rows.append(f"| `{ids.short(p.node_id)}` | {_md(step)} | {_md(p.family)} | {p.depth} | {p.predicted:.3g}x | "
                    f"{p.measured:.3g}x | {p.measured / p.predicted:.2f} |")
    text = head + (f"{len(points)} nodes; predictions were optimistic for {over} of them; the typical (median) "
                   f"prediction was off by a factor of {err:.2f}.\n\n") + "\n".join(rows)
    if png:
        text += f"\n\n![predicted vs measured]({png.name})"
    return text


def _narrative(h: RunHistory, wm: WorldModel | None, ids: ShortIds) -> str:
    lines = ["## How the search went", ""]
    if wm is None:
        return "\n".join(lines + ["The model had not built a world model yet."])
    fams = families(wm)
    per_fam: dict[str, list] = {f.node_id: [] for f in fams}
    for e in h.evaluations:
        fam = family_of(wm, wm.node(e.node_id)) if e.node_id in wm else None
        if fam is not None:
            per_fam.setdefault(fam.node_id, []).append(e)
    tried = [f for f in fams if per_fam.get(f.node_id)]
    untried = [f for f in fams if not per_fam.get(f.node_id)]
    lines.append(f"The model proposed {len(fams)} kernel families; the search tried {len(tried)}:")
    for f in tried:
        evals = per_fam[f.node_id]
        failed_attempts = sum(1 for e in evals if not e.passed)
        closed = [n for n in wm.nodes() if n.is_closed and (fam := family_of(wm, n)) and fam.node_id == f.node_id]
        # the closed nodes' scores, as the search judged them (a first measurement can be noise)
        scores = [s for s in map(measured_score, closed) if s is not None]
        lines.append(f"- {_md(f.choice or f.node_id)} (`{ids.short(f.node_id)}`): {len(evals)} attempts, "
                     f"{failed_attempts} failed, {len(closed)} steps closed, best "
                     + (f"{max(scores):.4g}x" if scores else "none closed"))
    if untried:
        lines.append("- not tried: " + ", ".join(f"{_md(f.choice or f.node_id)} (`{ids.short(f.node_id)}`)"
                                                for f in untried))
    closed_steps = [n for n in wm.nodes() if n.is_closed and not n.is_root]
    failed = h.of(R.CycleFailed)
    lines += ["", f"{len(closed_steps)} plan steps were closed with a passing kernel; {len(failed)} action cycles "
                  f"failed" + (":" if failed else ".")]
    for r in failed:
        node = wm.node(r.node_id) if r.node_id in wm else None
        title = node.action.title if node and node.action else ""
        short = ids.short(r.node_id) if node is not None else r.node_id
        lines.append(f"- `{short}` {_md(title)}: last status {r.status or '?'}" + ("; retired" if r.retired else ""))
    rejected = [r for r in h.of(R.Edit) if not r.ok]
    bad_code = h.of(R.BadCode)
    if rejected:
        lines.append(f"\n{len(rejected)} world-model edit scripts were rejected and re-asked "
                     f"(first reason: {_md(str((rejected[0].errors or ['?'])[0])[:200])}).")
    if bad_code:
        lines.append(f"\n{len(bad_code)} model replies held no usable code (the round was spent).")
    not_best, remeasured = h.of(R.NotBest), h.of(R.Remeasure)
    if not_best or remeasured:
        lines.append(f"\n{len(not_best)} passing kernels were not taken as the new best (not faster than the "
                     f"incumbent beyond the timing noise); {len(remeasured)} near-ties were re-measured side by side.")
    for change in h.config_changes():
        keys = ", ".join(map(str, change.changed)) or "settings"
        lines.append(f"\nSettings changed on resume (at record {change.seq}): {_md(keys)}.")
    statuses: dict[str, int] = {}
    for e in h.evaluations:
        statuses[e.report.status] = statuses.get(e.report.status, 0) + 1
    lines.append("\nEvaluation outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())) + ".")
    lines.append("\nStop: " + (h.stop_reason if h.stop_reason is not None else "the run has not ended."))
    if h.unknown_kinds:
        lines.append(f"\nThe journal also holds records this report does not interpret: {', '.join(h.unknown_kinds)}.")
    return "\n".join(lines)


def _cost(h: RunHistory) -> str:
    u = h.usage
    purposes = ", ".join(f"{k} {v}" for k, v in sorted(u.by_purpose.items())) or "-"
    wall = h.wall_s
    share = f" ({100 * h.eval_s / wall:.0f}% of the wall clock)" if wall else ""
    return ("## Cost and time\n\n| | |\n|---|---|\n"
            f"| model requests | {u.requests} ({purposes}) |\n"
            f"| model cost | ${u.cost_usd:.4f} |\n"
            f"| tokens | {u.total_tokens} ({u.prompt_tokens} prompt, {u.completion_tokens} completion) |\n"
            f"| wall clock | {format_duration(wall)} (first to last journal record) |\n"
            f"| evaluation time | {format_duration(h.eval_s)}{share} |\n"
            f"| rounds | {h.rounds} |\n"
            f"| evaluations | {len(h.evaluations)} |\n")


def _md(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _f(v: float | None) -> str:
    return f"{v:.4g}" if v is not None else "-"


def _pm(spread: float | None) -> str:
    """' ±5.0%': a measurement's relative spread, as show prints it."""
    return f" ±{100 * spread:.1f}%" if spread else ""
