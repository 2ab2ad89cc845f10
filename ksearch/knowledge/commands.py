"""`ksearch memory show|export|clear`: look at, copy out and forget what runs have stored.

The store is the one `ksearch run` uses (`--path`, else $XDG_CACHE_HOME/ksearch/knowledge.sqlite).
`show` and `export` never create a store; `clear` removes rows of one task (--task) or all (--all).
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ksearch.knowledge.recall import knobs_text
from ksearch.knowledge.store import ALL_REGIONS, EvaluationRow, KnowledgeStore, default_path

EXPORT_FORMATS = ("json", "csv")


class MemoryCommandError(ValueError):
    """A memory subcommand cannot do what it was asked; the message says what to pass instead."""


@dataclass(frozen=True)
class TaskSummary:
    """One (task signature, GPU): how much was measured and the best kernel."""

    task: str
    op_type: str
    signature: str
    gpu: str
    runs: int
    evaluations: int
    passed: int
    best_family: str | None
    best_knobs: dict[str, Any]
    best_score: float | None


def summarize(rows: Sequence[EvaluationRow]) -> list[TaskSummary]:
    groups: dict[tuple[str, str], list[EvaluationRow]] = defaultdict(list)
    for r in rows:
        if r.region == ALL_REGIONS:
            groups[(r.signature, r.gpu)].append(r)
    out = []
    for (sig, gpu), rs in groups.items():
        scored = [r for r in rs if r.score is not None]
        best = max(scored, key=lambda r: r.score) if scored else None      # type: ignore[arg-type,return-value]
        names = sorted({r.task for r in rs})
        out.append(TaskSummary(", ".join(names), rs[0].op_type, sig, gpu, len({r.run_id for r in rs}), len(rs),
                               len(scored), best.family if best else None, dict(best.knobs) if best else {},
                               best.score if best else None))
    return sorted(out, key=lambda s: (s.task, s.gpu))


def resolve_path(path: str | None) -> Path:
    return Path(path).expanduser() if path else default_path()


def open_existing(path: Path) -> KnowledgeStore | None:
    """The store at `path`, or None when no run has written one there."""
    return KnowledgeStore(path) if path.is_file() else None


def show_rows(path: Path, task: str | None) -> tuple[list[TaskSummary], int]:
    """Summaries (of one task name, when given) and the store's total row count."""
    store = open_existing(path)
    if store is None:
        return [], 0
    with store:
        rows = store.rows()
    if task is not None:
        _check_task(task, rows, path)
        rows = [r for r in rows if r.task == task]
    return summarize(rows), len(rows)


def _check_task(task: str, rows: Sequence[EvaluationRow], path: Path) -> None:
    names = sorted({r.task for r in rows})
    if task not in names:
        held = f"it holds {', '.join(names)}" if names else "it is empty"
        raise MemoryCommandError(f"--task {task}: the knowledge store {path} has no evaluations of that task ({held})")


def summary_cells(s: TaskSummary) -> list[str]:
    return [s.task, s.gpu, str(s.runs), str(s.evaluations), f"{s.passed}",
            s.best_family or "-", knobs_text(s.best_knobs) if s.best_family else "-",
            f"{s.best_score:.4g}x" if s.best_score is not None else "-"]


SUMMARY_COLUMNS = ("task", "gpu", "runs", "evaluations", "passed", "best family", "best knobs", "best score")


def export(path: Path, out: Path, fmt: str | None, task: str | None) -> int:
    """Write every row (of one task, when given) to `out` as JSON or CSV; returns how many."""
    fmt = fmt or out.suffix.lstrip(".").lower()
    if fmt not in EXPORT_FORMATS:
        raise MemoryCommandError(f"{out}: say which format with --format {'|'.join(EXPORT_FORMATS)} (or name the "
                                 f"file .json or .csv)")
    store = open_existing(path)
    if store is None:
        raise MemoryCommandError(f"no knowledge store at {path}: runs write one (memory=on, the default); "
                                 f"--path names another")
    with store:
        rows = store.rows()
    if task is not None:
        _check_task(task, rows, path)
        rows = [r for r in rows if r.task == task]
    out.parent.mkdir(parents=True, exist_ok=True)
    dicts = [r.to_json() for r in rows]
    if fmt == "json":
        out.write_text(json.dumps(dicts, indent=1, sort_keys=True) + "\n")
    else:
        with out.open("w", newline="") as f:
            fields = list(EvaluationRow.__dataclass_fields__)
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for d in dicts:
                w.writerow({k: json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v
                            for k, v in d.items()})
    return len(rows)


def clear(path: Path, task: str | None) -> int:
    """Remove the rows of one task name (or all, task=None); returns how many."""
    store = open_existing(path)
    if store is None:
        return 0
    with store:
        if task is not None:
            _check_task(task, store.rows(), path)
        return store.clear(task)
