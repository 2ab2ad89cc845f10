"""PNG plots for `ksearch report`, drawn with matplotlib's object API on the Agg canvas.

matplotlib is imported inside each function (it costs ~0.5 s and only `report` needs it), and pyplot is
never used: a Figure with an Agg canvas draws without touching the process-wide backend, so this works
headless and does not disturb a notebook that imported pyplot itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ksearch.store.history import RunHistory
from ksearch.viz.speedups import PredictionPoint


def _figure(width: float = 7.0, height: float = 4.2) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def plot_best_by_round(history: RunHistory, path: Path) -> Path | None:
    """Best score so far (step line) over every attempt's score; failed attempts as red marks at the bottom."""
    curve = [(r, b) for r, b in history.best_by_round() if b is not None]
    if not curve and not history.evaluations:
        return None
    fig = _figure()
    ax = fig.add_subplot()
    passed = [(e.round, e.score) for e in history.evaluations if e.score is not None]
    failed = [e.round for e in history.evaluations if e.score is None]
    if passed:
        ax.scatter(*zip(*passed), s=18, color="0.6", label="attempt score (first measurement)", zorder=2)
    if curve:
        ax.step(*zip(*curve), where="post", color="tab:blue", linewidth=2, label="best so far", zorder=3)
    scores = [y for _, y in passed] + [y for _, y in curve]
    if failed:
        ys = [min(scores)] * len(failed) if scores else [1.0] * len(failed)
        ax.scatter(failed, ys, marker="x", color="tab:red", s=24, label="failed attempt", zorder=2)
    score_axis(ax, scores)
    ax.set_xlabel("round")
    ax.set_ylabel(_score_label(history))
    ax.set_title(f"{history.task}: best score against round")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.savefig(path)
    return path


def plot_predictions(points: list[PredictionPoint], path: Path, title: str,
                     labels: dict[str, str] | None = None) -> Path | None:
    """Predicted against measured speedup over the parent kernel, one point per closed node, log axes; each
    point labelled with its node's short id (`labels`: full id -> short id, as `show` prints them).

    The legend sits below the axes with every family's name whole (wrapped, never cut); point labels are
    placed where they overlap nothing (viz/label_placement.py) and the axis caption says how many crowded
    ones were left out."""
    import textwrap

    from ksearch.viz.label_placement import place_labels

    labels = labels or {}
    if not points:
        return None
    families = sorted({p.family for p in points})
    names = {f: "\n".join(textwrap.wrap(f, 60)) or f for f in families}
    legend_lines = sum(names[f].count("\n") + 1 for f in families) + 1
    fig = _figure(6.4, 5.4 + 0.16 * legend_lines)
    ax = fig.add_subplot()
    colors = {f: f"C{i % 10}" for i, f in enumerate(families)}
    for fam in families:
        sub = [p for p in points if p.family == fam]
        ax.scatter([p.predicted for p in sub], [p.measured for p in sub], color=colors[fam], s=30,
                   label=names[fam], zorder=3)
    values = [p.predicted for p in points] + [p.measured for p in points]
    lo, hi = min(values) / 1.3, max(values) * 1.3
    ax.plot([lo, hi], [lo, hi], color="0.4", linestyle="--", linewidth=1, label="measured = predicted")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    _plain_log_ticks(ax)
    caption = "predicted speedup over the parent kernel"
    ax.set_xlabel(caption + "\n(points labelled by node)")      # two lines now: the final caption has two
    ax.set_ylabel("measured speedup over the parent kernel")
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    fig.legend(loc="outside lower center", fontsize=7, frameon=False)
    fig.canvas.draw()                      # the layout is final here ...
    fig.set_layout_engine("none")          # ... and stays so: labels are placed in display coordinates
    left_out = place_labels(ax, [(p.predicted, p.measured) for p in points],
                            [labels.get(p.node_id, p.node_id) for p in points])
    if left_out:
        ax.set_xlabel(f"{caption}\n(points labelled by node; {left_out} crowded label"
                      f"{'s' if left_out > 1 else ''} left out)")
    fig.savefig(path)
    return path


def plot_workload_speedups(speedups: dict[str, float], path: Path, title: str) -> Path | None:
    if not speedups:
        return None
    fig = _figure(max(4.0, 0.6 * len(speedups) + 2), 4.0)
    ax = fig.add_subplot()
    names = list(speedups)
    values = [speedups[n] for n in names]
    log = score_axis(ax, values, bars=True)
    # on a log axis a bar from 0 has no bottom: bars start at the axis' lower limit
    bottom = ax.get_ylim()[0] if log else 0.0
    ax.bar(range(len(names)), [v - bottom for v in values], bottom=bottom,
           color=["tab:green" if v >= 1 else "tab:orange" for v in values])
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("speedup vs baseline")
    ax.legend(fontsize=7, loc="best")
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    fig.savefig(path)
    return path


def score_axis(ax: Any, values: list[float], *, bars: bool = False) -> bool:
    """Scale a score axis to the data and mark the baseline (1.0x) where it falls inside it.

    The baseline line must not drag the axis: on a CPU every score is ~0.005x (interpreted Triton against
    the PyTorch reference), and a linear axis stretched from 0 to 1.0 draws every value as a flat line at
    the bottom. Scores are ratios, so when they span more than 3x, or sit more than 3x away from 1.0, the
    axis is logarithmic and fitted to the values; the baseline line is drawn only if it lies within 2x of
    them, and otherwise the legend says where it is. Returns whether the axis is logarithmic."""
    positive = [v for v in values if v and v > 0]
    if not positive:
        ax.axhline(1.0, color="0.3", linestyle=":", linewidth=1, label="baseline (1.0x)")
        return False
    lo, hi = min(positive), max(positive)
    log = hi / lo > 3 or hi < 1 / 3 or lo > 3
    if log:
        ax.set_yscale("log")
        ax.set_ylim(lo / 1.5, hi * 1.5)
        _plain_log_ticks(ax, axes="y")
    else:
        ax.set_ylim(0.0 if bars else min(lo, 1.0) * 0.9, max(hi, 1.0) * 1.1)
    if lo / 2 <= 1.0 <= hi * 2:
        ax.axhline(1.0, color="0.3", linestyle=":", linewidth=1, label="baseline (1.0x)")
    else:
        where = "above" if hi < 1.0 else "below"
        ax.plot([], [], color="0.3", linestyle=":", linewidth=1, label=f"baseline (1.0x): {where} the plot")
    return log


def _plain_log_ticks(ax: Any, axes: str = "xy") -> None:
    """Label log axes 0.5x, 1x, 2x rather than 5x10^-1."""
    from matplotlib.ticker import FuncFormatter

    fmt = FuncFormatter(lambda v, _pos: f"{v:.2g}x")
    # minor ticks: only 2x and 5x of each decade, or wide axes fill with overlapping labels
    minor = FuncFormatter(lambda v, _pos: f"{v:.2g}x" if f"{v:.1e}"[0] in "25" else "")
    for axis in [a for name, a in (("x", ax.xaxis), ("y", ax.yaxis)) if name in axes]:
        axis.set_major_formatter(fmt)
        axis.set_minor_formatter(minor)
        axis.set_tick_params(which="minor", labelsize=7)


def _score_label(history: RunHistory) -> str:
    names = {e.report.score_name for e in history.evaluations if e.report.score_name}
    name = names.pop() if len(names) == 1 else "score"
    return f"{name} (x baseline)" if name != "score" else "score"

