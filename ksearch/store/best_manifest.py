"""What best/ holds: one kernel of one node, or a shape dispatch over the kernels of several nodes.

`best/solution.py` alone does not say which: a dispatch (ksearch/planner/regions.py) is one module that
picks a member kernel per region of the shape space, and its score is its own measurement, not any
node's. The search writes `best/manifest.json` beside it with every new best, and every view (`show`,
the TUI, `report`, `export`, the end of `ksearch run`) describes the best from the same record, read back
from the journal (`manifest_from_history`), so they all name the same kernel, nodes and number.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Any

MANIFEST_NAME = "manifest.json"


class BestKind(str, Enum):  # noqa: UP042 - str() and format() give the value the records hold
    KERNEL = "kernel"          # the kernel one node's evaluation produced
    DISPATCH = "dispatch"      # one module that picks a member kernel from the input shapes


@dataclass(frozen=True)
class BestMember:
    """A kernel in best/: the node whose evaluation produced it, and (dispatch) the regions it serves."""

    solution_id: str
    node_id: str                        # full node id
    short_id: str                       # as `ksearch show` prints it (n7)
    step: str                           # the node's step, in a few words
    regions: tuple[str, ...] = ()       # dispatch: the shape regions it serves
    fallback: bool = False              # dispatch: also serves every region no member holds

    def serves(self) -> str:
        """Which shapes this member runs on, e.g. 'b0-1|L0-256; fallback for other shapes'."""
        where = ", ".join(self.regions)
        if self.fallback:
            where = f"{where}; fallback for other shapes" if where else "fallback for every shape"
        return where


@dataclass(frozen=True)
class Measured:
    """A best's number: the score, what kind of score, what it is against, and its held-out score."""

    score: float
    score_name: str
    baseline: str                       # what the score is against
    validate_score: float | None = None
    validate_set: str | None = None


@dataclass(frozen=True)
class BestManifest:
    kind: BestKind
    solution_id: str
    round: int                          # the round it was found in (a dispatch: composed after it)
    members: tuple[BestMember, ...]
    measured: Measured
    file: str = "solution.py"

    @property
    def score(self) -> float:
        return self.measured.score

    @property
    def score_name(self) -> str:
        return self.measured.score_name

    @property
    def baseline(self) -> str:
        return self.measured.baseline

    @property
    def validate_score(self) -> float | None:
        return self.measured.validate_score

    @property
    def validate_set(self) -> str | None:
        return self.measured.validate_set

    @property
    def node_ids(self) -> list[str]:
        return [m.node_id for m in self.members]

    @property
    def short_ids(self) -> list[str]:
        return list(dict.fromkeys(m.short_id for m in self.members))

    def describe(self) -> str:
        """'kernel of n3 (One program per ...)', or 'shape dispatch over 3 kernels of n3, n10 (n3: region,
        region and the fallback; n10: region)': the nodes whose kernels it dispatches to, and their regions."""
        if self.kind is BestKind.KERNEL:
            m = self.members[0]
            return f"kernel of {m.short_id}" + (f" ({m.step})" if m.step else "")
        by_node: dict[str, list[BestMember]] = {}
        for m in self.members:
            by_node.setdefault(m.short_id, []).append(m)
        parts = []
        for short, ms in by_node.items():
            regions = [r for m in ms for r in m.regions]
            where = ", ".join(regions) + (" and the fallback" if any(m.fallback for m in ms) else "")
            if not regions and any(m.fallback for m in ms):
                where = "the fallback"
            parts.append(f"{short}: {where}" if where else short)
        return (f"shape dispatch over {len(self.members)} kernels of {', '.join(by_node)} "
                f"({'; '.join(parts)})")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "score": self.score, "score_name": self.score_name, "baseline": self.baseline,
                "solution_id": self.solution_id, "round": self.round, "members": [asdict(m) for m in self.members],
                "file": self.file, "validate_score": self.validate_score, "validate_set": self.validate_set}

    @staticmethod
    def from_json(d: dict[str, Any]) -> BestManifest:
        members = tuple(BestMember(m["solution_id"], m["node_id"], m["short_id"], m.get("step", ""),
                                   tuple(m.get("regions") or ()), bool(m.get("fallback")))
                        for m in d.get("members") or [])
        measured = Measured(float(d["score"]), d.get("score_name", "score"), d.get("baseline", ""),
                            d.get("validate_score"), d.get("validate_set"))
        return BestManifest(BestKind(d["kind"]), d["solution_id"], int(d.get("round", 0)), members, measured,
                            d.get("file", "solution.py"))


def read_manifest(best_dir: Path) -> BestManifest | None:
    """best/manifest.json, or None when the folder has none (a run made before manifests existed)."""
    path = Path(best_dir) / MANIFEST_NAME
    if not path.is_file():
        return None
    return BestManifest.from_json(json.loads(path.read_text()))


def manifest_from_history(history: Any, ids: Any = None) -> BestManifest | None:
    """The best as the journal records it: its last `best` record, and the `dispatch` record that composed
    it when it is a dispatch. `ids`: the run's ShortIds (built from the history when not given)."""
    from ksearch.store.short_ids import ShortIds

    best = history.best
    if best is None:
        return None
    wm = history.world_model()
    ids = ids if ids is not None else ShortIds.from_history(history)
    if wm is not None:
        ids.covering(wm)
    report = history.best_report()
    score_name = (report.score_name if report and report.score_name else "score")
    baseline = (report.baseline if report and report.baseline else
                history.baseline.label if history.baseline else "the baseline")
    common = dict(solution_id=best.solution_id, round=best.round, file=_file_of(history, best.solution_id),
                  measured=Measured(best.score, score_name, baseline, best.validate_score, best.validate_set))
    dispatch = _dispatch_record(history, best.solution_id)
    if dispatch is None:
        return BestManifest(BestKind.KERNEL, members=(member(best.node_id, best.solution_id, ids, wm),), **common)
    regions: dict[str, list[str]] = {}
    for row in dispatch.regions or []:
        if isinstance(row, dict) and row.get("solution_id"):
            regions.setdefault(row["solution_id"], []).append(str(row.get("region")))
    nodes = dispatch.member_nodes or {}
    members = tuple(member(nodes.get(sid) or _node_of(history, sid, "?"), sid, ids, wm, tuple(regions.get(sid, ())),
                           sid == dispatch.fallback) for sid in dispatch.members or [])
    return BestManifest(BestKind.DISPATCH, members=members, **common)


def member(node_id: str, solution_id: str, ids: Any, wm: Any, regions: tuple[str, ...] = (),
           fallback: bool = False) -> BestMember:
    """A BestMember for a node of `wm`, named by `ids` (the run's ShortIds)."""
    step = wm.node(node_id).step if wm is not None and node_id in wm else ""
    return BestMember(solution_id, node_id, ids.short(node_id), step, regions, fallback)


def _dispatch_record(history: Any, solution_id: str) -> Any:
    """The accepted `dispatch` record (store/records.py) that composed `solution_id`, if it is one."""
    for r in reversed(history.run_state.dispatches):
        if r.solution_id == solution_id and r.accepted:
            return r
    return None


def _node_of(history: Any, solution_id: str, default: str) -> str:
    """The node whose evaluation first produced `solution_id` (a dispatch's evaluations are not a node's)."""
    for e in history.evaluations:
        if e.solution_id == solution_id and e.node_id != "dispatch":
            return e.node_id
    return default


def _file_of(history: Any, solution_id: str) -> str:
    return "solution.cu" if history.solution_language(solution_id) == "cuda" else "solution.py"
