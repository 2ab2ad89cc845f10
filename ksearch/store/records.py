"""Typed journal records: one dataclass per record kind, parsed in one place.

The journal is JSON lines (store/journal.py writes them); everything that reads a journal back - history
for the views, fork, the recorded evaluator of a replay, the settings of a resume - reads these types
instead of picking fields out of dicts by kind string. Parsing is tolerant: a field a record lacks (an
older ksearch wrote it) gets its default, unknown fields are kept in `extra`, and a kind this module does
not know becomes a plain `Record`.

`cycle` is set on the records of a cycle's own work (its model requests and evaluations, matched by cycle
on replay) and on `select` (which cycle it started).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ksearch.store.journal import read_journal


@dataclass
class Record:
    kind: str
    seq: int = -1
    t: float | None = None
    cycle: int | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    KIND: ClassVar[str] = ""


@dataclass
class RunStart(Record):
    KIND: ClassVar[str] = "run_start"
    task: str = ""
    workload_set: str = ""
    device: str = ""
    model: str = ""
    workloads: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] | None = None


@dataclass
class ConfigChange(Record):
    KIND: ClassVar[str] = "config"
    config: dict[str, Any] = field(default_factory=dict)
    changed: dict[str, Any] = field(default_factory=dict)


@dataclass
class Baseline(Record):
    KIND: ClassVar[str] = "baseline"
    key: str = ""
    value: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelCall(Record):
    KIND: ClassVar[str] = "model"
    key: str = ""
    request: dict[str, Any] = field(default_factory=dict)
    value: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return str(self.value.get("text", ""))

    @property
    def usage(self) -> dict[str, Any]:
        return self.value.get("usage") or {}

    @property
    def purpose(self) -> str:
        return str(self.request.get("purpose") or "?")


@dataclass
class ModelFailed(Record):
    KIND: ClassVar[str] = "model_failed"
    key: str = ""
    purpose: str = ""
    error: str = ""
    usage: dict[str, Any] = field(default_factory=dict)


@dataclass
class Evaluation(Record):
    KIND: ClassVar[str] = "evaluation"
    key: str = ""
    round: int = 0
    node_id: str = "?"
    attempt: int = 0
    solution_id: str = ""
    value: dict[str, Any] = field(default_factory=dict)


@dataclass
class Remeasure(Record):
    KIND: ClassVar[str] = "remeasure"
    key: str = ""
    round: int = 0
    solution_ids: list[str] = field(default_factory=list)
    value: dict[str, Any] = field(default_factory=dict)

    @property
    def reports(self) -> list[dict[str, Any]]:
        reports = self.value.get("reports") if isinstance(self.value, dict) else None
        return [r for r in reports or [] if isinstance(r, dict)]


@dataclass
class Edit(Record):
    KIND: ClassVar[str] = "edit"
    purpose: str = ""
    ok: bool = False
    errors: list[str] = field(default_factory=list)
    new_nodes: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)


@dataclass
class EditFallback(Edit):
    KIND: ClassVar[str] = "edit_fallback"
    node_id: str | None = None
    model_errors: list[str] = field(default_factory=list)


@dataclass
class Select(Record):
    KIND: ClassVar[str] = "select"
    node_id: str = ""
    round: int = 0
    title: str = ""
    policy: str = ""
    why: dict[str, Any] = field(default_factory=dict)


@dataclass
class BestRecord(Record):
    KIND: ClassVar[str] = "best"
    solution_id: str = ""
    score: float | None = None
    node_id: str = "?"
    round: int = 0
    basis: str = ""


@dataclass
class NotBest(Record):
    KIND: ClassVar[str] = "not_best"
    solution_id: str = ""
    score: float | None = None
    incumbent: str = ""
    basis: str = ""


@dataclass
class Attach(Record):
    KIND: ClassVar[str] = "attach"
    node_id: str = ""
    solution_id: str = ""
    score: float | None = None
    parent_score: float | None = None
    predicted: float | None = None


@dataclass
class CycleFailed(Record):
    KIND: ClassVar[str] = "cycle_failed"
    node_id: str = ""
    retired: bool = False
    status: str | None = None


@dataclass
class BadCode(Record):
    KIND: ClassVar[str] = "bad_code"
    round: int = 0
    error: str = ""


@dataclass
class TreeSnapshot(Record):
    KIND: ClassVar[str] = "tree"
    round: int = 0
    tree: dict[str, Any] = field(default_factory=dict)


@dataclass
class Fork(Record):
    KIND: ClassVar[str] = "fork"
    source: str = ""                     # the record's "from" (a Python keyword)
    node: str = ""
    seed: dict[str, Any] | None = None
    measurements: str = ""


@dataclass
class RunEnd(Record):
    KIND: ClassVar[str] = "run_end"
    stop: str = "ended"
    evaluations: int = 0
    best: dict[str, Any] | None = None
    spend: dict[str, Any] = field(default_factory=dict)


TYPES: dict[str, type[Record]] = {c.KIND: c for c in (
    RunStart, ConfigChange, Baseline, ModelCall, ModelFailed, Evaluation, Remeasure, Edit, EditFallback, Select,
    BestRecord, NotBest, Attach, CycleFailed, BadCode, TreeSnapshot, Fork, RunEnd)}
_RENAMED = {"from": "source"}
_DEFAULT_TYPES = {bool: bool, int: int, float: float, str: str}


def parse_record(d: dict[str, Any]) -> Record:
    """The typed record for one journal line; wrongly typed fields fall back to their defaults."""
    kind = str(d.get("kind", "?"))
    cls = TYPES.get(kind, Record)
    names = {f.name: f for f in dataclasses.fields(cls)}
    kw: dict[str, Any] = {"kind": kind}
    extra: dict[str, Any] = {}
    for k, v in d.items():
        name = _RENAMED.get(k, k)
        if name in ("kind", "extra") or name not in names:
            if k != "kind":
                extra[k] = v
            continue
        kw[name] = _coerce(names[name], v)
    kw = {k: v for k, v in kw.items() if v is not _BAD}
    return cls(**kw, extra=extra)


_BAD = object()


def _coerce(f: dataclasses.Field, v: Any) -> Any:
    """Light checks for the scalar fields the readers do arithmetic or comparisons on."""
    t = str(f.type)
    if v is None:
        return None if "None" in t else _BAD
    if t == "int" or t.startswith("int |"):
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else _BAD
    if t.startswith("float"):
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else _BAD
    if t == "str" or t.startswith("str |"):
        return str(v)
    if t.startswith("dict"):
        return v if isinstance(v, dict) else _BAD
    if t.startswith("list"):
        return v if isinstance(v, list) else _BAD
    return v


def read_records(path: Path) -> tuple[list[Record], int]:
    """Typed records of a journal file and the byte length of its well-formed prefix (see read_journal)."""
    raw, good = read_journal(Path(path))
    return [parse_record(r) for r in raw], good


def of_kind(records: list[Record], cls: type[Record]) -> list[Any]:
    return [r for r in records if type(r) is cls]
