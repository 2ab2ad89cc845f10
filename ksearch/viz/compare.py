"""`ksearch compare RUN_DIR...`: runs side by side, and how fast each reached a common score.

"How fast" needs one score that every run can be measured against; by default it is the smallest best
score among the runs, which every run that found a passing kernel has reached, so each row gets a time
and a round count (a run that never got there shows "-").

Scores are ratios to a baseline each run measured itself, so every row shows that baseline (geometric
mean over the workloads, with its spread), and `baseline_note` says when two runs of one task measured
baselines that differ beyond their spread: their scores then do not compare, their kernels do.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import RenderableType
from rich.text import Text

from ksearch.eval.clocks.noise import compare_scores
from ksearch.store.history import NotARunError, RunHistory, is_run_dir
from ksearch.viz.fit_table import Column, fit_table
from ksearch.viz.tree_view import format_duration


@dataclass
class CompareRow:
    run: str
    task: str
    model: str
    policy: str
    seed: object
    best_score: float | None
    rounds: int
    evaluations: int
    cost_usd: float
    tokens: int
    wall_s: float | None
    status: str
    time_to_target_s: float | None
    rounds_to_target: int | None
    baseline_ms: float | None = None        # geometric mean over the workloads of the run's baseline
    baseline_spread: float | None = None    # its relative spread (RMS over the workloads)
    workload_set: str = "?"
    device: str = "?"
    path: str = ""                          # the run directory as given


def expand_run_dirs(paths: list[str | Path]) -> list[Path]:
    """Run directories from the arguments; a sweep folder (sweep.json) stands for the runs inside it."""
    out: list[Path] = []
    for p in map(Path, paths):
        sweep = p / "sweep.json"
        if sweep.is_file():
            arms = json.loads(sweep.read_text()).get("arms", [])
            dirs = [Path(a["run_dir"]) for a in arms if a.get("run_dir")]
            dirs = [d if d.is_absolute() else p / d for d in dirs]
            out += [d for d in dirs if is_run_dir(d)]
        elif not is_run_dir(p) and p.is_dir() and list(p.glob("*/journal.jsonl")):
            out += sorted(d.parent for d in p.glob("*/journal.jsonl"))
        else:
            out.append(p)
    if not out:
        raise NotARunError(f"no runs in {', '.join(map(str, paths))}; pass run directories or a sweep directory")
    return out


def default_target(histories: list[RunHistory]) -> float | None:
    scores = [h.best.score for h in histories if h.best and h.best.score is not None]
    return min(scores) if scores else None


def compare_rows(histories: list[RunHistory], target: float | None) -> list[CompareRow]:
    rows = []
    for h in histories:
        hit = h.reached(target) if target is not None else None
        rows.append(CompareRow(
            run=_short(h.run_dir), task=h.task, model=h.model, policy=h.policy, seed=h.seed,
            best_score=h.best.score if h.best else None, rounds=h.rounds, evaluations=len(h.evaluations),
            cost_usd=h.usage.cost_usd, tokens=h.usage.total_tokens, wall_s=h.wall_s,
            status=(h.stop_reason or "ended") if h.ended else "not finished",
            time_to_target_s=(hit.t - h.started_at) if hit and hit.t is not None and h.started_at is not None else None,
            rounds_to_target=hit.round if hit else None, **_baseline_summary(h),
            workload_set=h.workload_set, device=h.device, path=str(h.run_dir)))
    return rows


def _baseline_summary(h: RunHistory) -> dict[str, float | None]:
    """The run's baseline in one number: geometric mean of its per-workload times, RMS of their spreads."""
    times = h.baseline.best() if h.baseline else {}
    spreads = list(h.baseline.best_spread().values()) if h.baseline else []
    positive = [v for v in times.values() if v and v > 0]
    if not positive:
        return {"baseline_ms": None, "baseline_spread": None}
    return {"baseline_ms": math.exp(sum(map(math.log, positive)) / len(positive)),
            "baseline_spread": math.sqrt(sum(x * x for x in spreads) / len(spreads)) if spreads else None}


def baseline_note(rows: list[CompareRow]) -> str | None:
    """A warning when runs of one task, workload set and device measured baselines that differ beyond
    their spreads (a busy CPU, another GPU clock): their scores divide by different numbers."""
    groups: dict[tuple[str, str, str], list[CompareRow]] = {}
    for r in rows:
        if r.baseline_ms:
            groups.setdefault((r.task, r.workload_set, r.device), []).append(r)
    for (task, _, _), group in groups.items():
        lo = min(group, key=lambda r: r.baseline_ms or 0.0)
        hi = max(group, key=lambda r: r.baseline_ms or 0.0)
        if lo is hi or compare_scores(hi.baseline_ms or 0.0, hi.baseline_spread or 0.0, lo.baseline_ms or 0.0,
                                      lo.baseline_spread or 0.0) == "tie":
            continue
        return (f"the baselines of {lo.run} and {hi.run} differ ({lo.baseline_ms:.4g} vs {hi.baseline_ms:.4g} ms, "
                f"beyond their spread), so their scores do not compare; time their best kernels side by side: "
                f"`ksearch bench task={task} --run {lo.path} --run {hi.path}`")
    return None


def compare_table(rows: list[CompareRow], target: float | None, width: int = 100) -> RenderableType:
    """One row per run, no wider than `width`. Settings every run shares (task, model, policy, seed) move
    to the caption, so the columns that remain are the ones that differ. Run folders, tasks and models are
    names a user types: they are never cut (ksearch/viz/fit_table.py stacks the rows when they do not fit)."""
    cells = []
    top = max((r.best_score for r in rows if r.best_score is not None), default=None)
    for r in rows:
        cells.append({
            "run": r.run, "task": r.task, "model": r.model, "policy": r.policy, "seed": str(r.seed),
            "best": f"{r.best_score:.4g}x" if r.best_score is not None else "-",
            "baseline ms": (f"{r.baseline_ms:.4g}" + (f" ±{100 * r.baseline_spread:.0f}%" if r.baseline_spread else "")
                            if r.baseline_ms else "-"),
            "rounds": str(r.rounds), "evals": str(r.evaluations), "cost": f"${r.cost_usd:.4f}",
            "wall": format_duration(r.wall_s),
            "to target": (f"{format_duration(r.time_to_target_s)}, round {r.rounds_to_target}"
                          if r.rounds_to_target is not None else "-"),
            "status": r.status})
    shared = [k for k in ("task", "model", "policy", "seed") if len(rows) > 1 and len({c[k] for c in cells}) == 1]
    title = "runs" + (f" (target score {target:.4g}x)" if target is not None else "")
    caption = ", ".join(f"{k} {cells[0][k]}" for k in shared) if shared else None
    names = [k for k in cells[0] if k not in shared] if cells else []
    columns = [Column(k, whole=k in ("run", "task", "model", "policy"),
                      justify="left" if k in ("run", "task", "model", "policy", "status") else "right") for k in names]
    table_rows = []
    for r, c in zip(rows, cells):
        line = [Text(c[k]) for k in names]
        if r.best_score is not None and r.best_score == top and "best" in names:
            line[names.index("best")].stylize("bold green")
        table_rows.append(line)
    return fit_table(columns, table_rows, width, title=title, caption=f"all runs: {caption}" if caption else None)


def compare_json(rows: list[CompareRow], target: float | None) -> str:
    return json.dumps({"target": target, "runs": [asdict(r) for r in rows]}, indent=1, default=str)


def _short(path: Path) -> str:
    """Enough of the path to tell runs apart: the last two parts (task/timestamp, or sweep/arm)."""
    parts = path.parts
    return str(Path(*parts[-2:])) if len(parts) >= 2 else str(path)

