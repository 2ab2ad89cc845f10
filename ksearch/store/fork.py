"""Forks: a new run that starts from the path root..node of another run's plan tree.

The new run gets those plan nodes (beliefs, notes, attached kernels) and nothing below or beside them, so
a user can branch a search from any plan, e.g. to explore it with another model or a larger budget. The
kernels travel with it (copied into the new run's solution store); their measurements travel only when
the fork measures the same task on the same workload set and device (the search decides that).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ksearch.store.records as R
from ksearch.instantiate.solution import Solution
from ksearch.store.journal import read_records
from ksearch.store.state import fold


class ForkError(ValueError):
    """The fork source or node is not usable; the message says what to pass instead."""


@dataclass(frozen=True)
class MeasuredOn:
    """Where a run's measurements were taken: they compare only with measurements taken the same way."""

    task: str
    workload_set: str
    device: str


@dataclass
class ForkSeed:
    source: str                         # the source run directory
    node_id: str
    measured_on: MeasuredOn
    tree: dict[str, Any]                # WorldModel JSON of the path root..node
    solutions: list[Solution] = field(default_factory=list)
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)   # solution id -> its EvalReport JSON


def load_fork(source: Path, node_id: str | None) -> ForkSeed:
    source = Path(source)
    records, _ = read_records(source / "journal.jsonl")
    if not records:
        raise ForkError(f"fork.from={source} is not a run directory with a journal; pass a directory written by "
                        f"`ksearch run`")
    state = fold(records)
    start, full = state.start, state.world_model()
    if start is None or full is None or state.snapshot is None:
        raise ForkError(f"fork.from={source}: the run never built its world model, so there is nothing to fork")
    if not node_id:
        raise ForkError(f"fork.from needs fork.node=ID too (a node of {source}; `ksearch show {source}` lists them)")
    ids = state.short_ids.covering(full)
    try:
        node_id = ids.resolve(str(node_id), full)        # the short ids `ksearch show` prints, or full ids
    except KeyError:
        shown = [ids.short(n.node_id) for n in full.nodes()]
        raise ForkError(f"fork.node={node_id} is not a node of {source}; it has {', '.join(shown[:20])}"
                        + (" ..." if len(shown) > 20 else "") + f" (`ksearch show {source}` lists them)") from None
    path = full.path(node_id)
    keep = {n.node_id for n in path}
    tree = dict(state.snapshot)
    tree["nodes"] = [n.to_json() for n in path]
    tree["active_leaf_id"] = node_id if node_id in keep else "root"
    reports: dict[str, dict[str, Any]] = {}
    for r in state.evaluations:                 # the attached kernel's measurement: its last evaluation
        if r.solution_id:
            reports[r.solution_id] = r.value
    solutions = []
    for n in path:
        if n.solution is None:
            continue
        sid = n.solution.solution_id
        f = source / "solutions" / f"{sid}.json"
        if not f.is_file():
            raise ForkError(f"{source} lacks solutions/{sid}.json (the kernel of node {n.node_id}); the run "
                            f"directory is incomplete")
        solutions.append(Solution.from_json(json.loads(f.read_text())))
    return ForkSeed(str(source), node_id, MeasuredOn(start.task, start.workload_set, start.device), tree, solutions,
                    {s.solution_id: reports[s.solution_id] for s in solutions if s.solution_id in reports})


def seed_record(seed: ForkSeed) -> dict[str, Any]:
    """What the fork journal record keeps: enough to rebuild the seed on resume without the source run."""
    on = seed.measured_on
    return {"task": on.task, "workload_set": on.workload_set, "device": on.device, "tree": seed.tree,
            "reports": seed.reports, "solution_ids": [s.solution_id for s in seed.solutions]}


def seed_from_own_journal(run_path: Path) -> ForkSeed | None:
    """The seed a forked run started from, read back from its own journal and solution store."""
    records, _ = read_records(Path(run_path) / "journal.jsonl")
    rec: R.Fork | None = next(iter(R.of_kind(records, R.Fork)), None)
    if rec is None or rec.seed is None:
        return None
    seed = rec.seed
    sols = [Solution.from_json(json.loads((Path(run_path) / "solutions" / f"{sid}.json").read_text()))
            for sid in seed["solution_ids"]]
    return ForkSeed(rec.source, rec.node, MeasuredOn(seed["task"], seed["workload_set"], seed["device"]),
                    seed["tree"], sols, seed["reports"])
