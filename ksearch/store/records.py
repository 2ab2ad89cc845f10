"""Typed journal records: one pydantic model per record kind, and the one decoder that reads them back.

The journal is JSON lines (store/journal.py writes and reads them). Every writer builds one of these
models and hands it to `Journal.append` or `Journal.memo`; every reader - the run state (store/state.py)
that the search, `show`, fork and replay all fold the records into - gets them from `decode`. Decoding
is tolerant, so a journal written by an older or newer ksearch still reads: a field a record lacks gets
its default, a field of the wrong type is dropped (and gets its default), unknown fields are kept in
`extra`, and a kind this module does not know becomes a plain `Record`.

Each record says how a resumed run replays it (`ROLE`): the owner's records are matched in order, and
their `CHECK` fields must come out the same; answers (`memo` records: model replies and measurements)
are handed back by key instead of asked again; informational records are not matched at all.

`cycle` is set on the records of a cycle's own work (its model requests and evaluations, matched by
cycle on replay) and on `select` (which cycle it started).
"""

from __future__ import annotations

from enum import Enum
from functools import cached_property
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, model_validator

from ksearch.eval.report import BaselineTimes, EvalReport


class Role(str, Enum):  # noqa: UP042 - str() and format() give the value the records hold
    ORDERED = "ordered"          # the owner's decisions: matched in order on replay
    ANSWER = "answer"            # something asked outside the loop: recorded once, handed back on replay
    INFO = "info"                # informs, never matched (a change of settings, a failed request's cost)


class Record(BaseModel):
    """One journal line. Field order is the line's key order."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, coerce_numbers_to_str=True)

    seq: int = -1
    kind: str = "?"
    t: float | None = None

    ROLE: ClassVar[Role] = Role.ORDERED
    CHECK: ClassVar[tuple[str, ...]] = ()                 # fields a resumed run must reproduce
    OMIT_NONE: ClassVar[frozenset[str]] = frozenset()     # fields left out of the line while None

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_fields_when_written(cls, data: Any, info: ValidationInfo) -> Any:
        """A writer's misspelt field is an error; only `decode` keeps fields it does not know."""
        if isinstance(data, dict) and not (info.context or {}).get("decoding"):
            known = set(cls.model_fields) | {f.alias for f in cls.model_fields.values() if f.alias}
            unknown = set(data) - known
            if unknown:
                raise ValueError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
        return data

    @property
    def extra(self) -> dict[str, Any]:
        """Fields this version does not know (a newer or older ksearch wrote them)."""
        return dict(self.model_extra or {})

    def check(self) -> dict[str, Any]:
        """{json name: value} of the CHECK fields: what replay compares with the recorded record."""
        return {self._json_name(f): getattr(self, f) for f in self.checked_fields()}

    def checked_fields(self) -> tuple[str, ...]:
        return self.CHECK

    def omitted(self) -> set[str]:
        return {f for f in self.OMIT_NONE if getattr(self, f) is None}

    def to_json(self) -> dict[str, Any]:
        """The line's object: fields in declaration order under their JSON names, then unknown fields."""
        skip = self.omitted()
        out = {self._json_name(f): getattr(self, f) for f in type(self).model_fields if f not in skip}
        out.update(self.model_extra or {})
        return out

    @classmethod
    def _json_name(cls, name: str) -> str:
        return cls.model_fields[name].alias or name


class RunStart(Record):
    kind: str = "run_start"
    CHECK = ("task", "workload_set", "device")
    OMIT_NONE = frozenset({"generators"})
    task: str = ""
    workload_set: str = ""
    device: str = ""
    workloads: list[dict[str, Any]] = Field(default_factory=list)
    model: str = ""
    config: dict[str, Any] | None = None
    # The code generators' versions the run started with (a generator's output is a solution id a resume
    # must reproduce, so a run keeps its versions for good); absent (None) in runs recorded before: all version 1.
    generators: dict[str, int] | None = None


class ConfigChange(Record):
    kind: str = "config"
    ROLE = Role.INFO
    config: dict[str, Any] = Field(default_factory=dict)
    changed: dict[str, Any] = Field(default_factory=dict)


class ModelFailed(Record):
    kind: str = "model_failed"
    ROLE = Role.INFO
    key: str = ""
    purpose: str = ""
    error: str = ""
    usage: dict[str, Any] = Field(default_factory=dict)
    cycle: int | None = None


class Answer(Record):
    """A memo record: `value` is what was asked for, `key` names the question (each kind declares both, so
    they keep their place in its line)."""

    ROLE = Role.ANSWER


class Baseline(Answer):
    kind: str = "baseline"
    key: str = ""
    value: dict[str, Any] = Field(default_factory=dict)

    @property
    def times(self) -> BaselineTimes | None:
        return baseline_from_json(self.value)

    @property
    def workload_set(self) -> str | None:
        """The set this baseline was measured on (its key is DEVICE:SET:SEED)."""
        parts = self.key.split(":")
        return parts[-2] if len(parts) >= 3 else None


class ModelCall(Answer):
    kind: str = "model"
    OMIT_NONE = frozenset({"cycle"})
    key: str = ""
    cycle: int | None = None
    request: dict[str, Any] = Field(default_factory=dict)
    value: dict[str, Any] = Field(default_factory=dict)

    @property
    def text(self) -> str:
        return str(self.value.get("text", ""))

    @property
    def usage(self) -> dict[str, Any]:
        usage = self.value.get("usage")
        return usage if isinstance(usage, dict) else {}

    @property
    def purpose(self) -> str:
        return str(self.request.get("purpose") or "?")


class Evaluation(Answer):
    kind: str = "evaluation"
    OMIT_NONE = frozenset({"cycle"})
    key: str = ""
    cycle: int | None = None
    round: int = 0
    node_id: str = "?"
    attempt: int = 0
    solution_id: str = ""
    value: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _named_in_report(self) -> Evaluation:
        """Records from before `solution_id` existed name the kernel in the report only."""
        if not self.solution_id and isinstance(self.value.get("solution_id"), str):
            self.solution_id = self.value["solution_id"]
        return self

    @cached_property
    def report(self) -> EvalReport:
        return report_from_json(self.value)

    @property
    def passed(self) -> bool:
        return self.report.passed

    @property
    def score(self) -> float | None:
        return self.report.score if self.report.passed else None


class Remeasure(Answer):
    kind: str = "remeasure"
    key: str = ""
    round: int = 0
    solution_ids: list[str] = Field(default_factory=list)
    value: dict[str, Any] = Field(default_factory=dict)

    @property
    def reports(self) -> list[dict[str, Any]]:
        reports = self.value.get("reports")
        return [r for r in reports or [] if isinstance(r, dict)]


class Validate(Answer):
    """A kernel measured on the held-out set (planner/validation.py)."""

    kind: str = "validate"
    key: str = ""
    round: int = 0
    solution_id: str = ""
    set: str | None = None
    value: dict[str, Any] = Field(default_factory=dict)


class Edit(Record):
    kind: str = "edit"
    CHECK = ("purpose", "ok")
    purpose: str = ""
    ok: bool = False
    errors: list[str] = Field(default_factory=list)
    new_nodes: list[str] = Field(default_factory=list)
    changed: list[str] = Field(default_factory=list)


class EditFallback(Record):
    kind: str = "edit_fallback"
    CHECK = ("purpose", "ok")
    purpose: str = ""
    ok: bool = False
    node_id: str | None = None
    model_errors: list[str] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    new_nodes: list[str] = Field(default_factory=list)
    changed: list[str] = Field(default_factory=list)


class TreeSnapshot(Record):
    kind: str = "tree"
    round: int = 0
    tree: dict[str, Any] = Field(default_factory=dict)


class Fork(Record):
    kind: str = "fork"
    CHECK = ("source", "node")
    source: str = Field("", alias="from")          # the source run ("from" is a Python keyword)
    node: str = ""
    seed: dict[str, Any] | None = None
    measurements: str = ""

    @property
    def carried_over(self) -> bool:
        return self.measurements == "carried over"


class Select(Record):
    kind: str = "select"
    CHECK = ("node_id", "round")
    node_id: str = ""
    round: int = 0
    title: str = ""
    policy: str = ""
    why: dict[str, Any] = Field(default_factory=dict)
    cycle: int | None = None


class BadCode(Record):
    kind: str = "bad_code"
    CHECK = ("round",)
    round: int = 0
    error: str = ""


class Attach(Record):
    kind: str = "attach"
    CHECK = ("node_id", "solution_id")
    node_id: str = ""
    solution_id: str | None = None
    score: float | None = None
    parent_score: float | None = None
    predicted: float | None = None


class CycleFailed(Record):
    kind: str = "cycle_failed"
    CHECK = ("node_id",)
    node_id: str = ""
    retired: bool = False
    status: str | None = None


class NotBest(Record):
    kind: str = "not_best"
    CHECK = ("solution_id",)
    solution_id: str = ""
    score: float | None = None
    incumbent: str | None = None
    basis: str = ""


class BestRecord(Record):
    kind: str = "best"
    CHECK = ("solution_id",)
    solution_id: str = ""
    score: float | None = None
    node_id: str = "?"
    round: int = 0
    basis: str = ""
    validate_score: float | None = None
    validate_set: str | None = None


class ValidateVerdict(Record):
    """The held-out gate's decision on a candidate best (planner/validation.py)."""

    kind: str = "validate_verdict"
    CHECK = ("solution_id", "accepted")
    solution_id: str = ""
    accepted: bool = False
    round: int = 0
    set: str | None = None
    score: float | None = None
    validate_score: float | None = None
    incumbent_validate_score: float | None = None
    basis: str = ""


class Dispatch(Record):
    """A shape dispatch over the per-region bests (planner/regions.py): composed or not, and its verdict."""

    kind: str = "dispatch"
    composed: bool = False
    reason: str | None = None                        # why it was not composed
    solution_id: str | None = None
    accepted: bool | None = None
    members: list[str] | None = None
    fallback: str | None = None
    member_nodes: dict[str, str] | None = None
    table: dict[str, str] | None = None
    regions: list[dict[str, Any]] | None = None
    score: float | None = None
    verdict: str | None = None

    def checked_fields(self) -> tuple[str, ...]:
        return ("composed", "solution_id", "accepted") if self.composed else ("composed",)

    def omitted(self) -> set[str]:
        if self.composed:
            return {"reason"}
        return {f for f in type(self).model_fields if f not in Record.model_fields and f not in ("composed", "reason")}


class MemoryRecall(Answer):
    """What the knowledge store across runs gave this run at its start (ksearch/knowledge): a resume takes
    it from here, never from the live store."""

    kind: str = "memory"
    key: str = ""                                     # task signature @ GPU
    value: dict[str, Any] = Field(default_factory=dict)


class RunEnd(Record):
    kind: str = "run_end"
    CHECK = ("stop",)
    stop: str = "ended"
    evaluations: int = 0
    best: dict[str, Any] | None = None
    spend: dict[str, Any] = Field(default_factory=dict)


TYPES: dict[str, type[Record]] = {c.model_fields["kind"].default: c for c in (
    RunStart, ConfigChange, ModelFailed, Baseline, ModelCall, Evaluation, Remeasure, Validate, Edit, EditFallback,
    TreeSnapshot, Fork, Select, BadCode, Attach, CycleFailed, NotBest, BestRecord, ValidateVerdict, Dispatch,
    MemoryRecall, RunEnd)}


def decode(raw: dict[str, Any]) -> Record:
    """The typed record of one journal line (see the module doc for what is tolerated)."""
    cls = TYPES.get(str(raw.get("kind", "?")), Record)
    data = dict(raw)
    for _ in range(len(data) + 1):
        try:
            return cls.model_validate(data, context={"decoding": True})
        except ValidationError as e:
            bad = {err["loc"][0] for err in e.errors() if err["loc"]}
            if not bad & set(data):
                raise
            for name in bad:
                data.pop(str(name), None)    # a wrongly typed field gets its default
    raise AssertionError("unreachable: every pass drops at least one field")


def of_kind(records: list[Record], cls: type[Record]) -> list[Any]:
    return [r for r in records if type(r) is cls]


def _known(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    names = set(getattr(cls, "__dataclass_fields__", {}))
    return {k: v for k, v in d.items() if k in names}


def report_from_json(d: dict[str, Any]) -> EvalReport:
    """An EvalReport from a recorded value; fields another ksearch version added or lacks are tolerated."""
    from ksearch.eval.report import WorkloadResult

    d = _known(EvalReport, d)
    d["workloads"] = [WorkloadResult(**_known(WorkloadResult, w)) for w in d.get("workloads", [])
                      if isinstance(w, dict)]
    d.setdefault("solution_id", "")
    d.setdefault("status", "?")
    d.setdefault("device", "?")
    return EvalReport(**d)


def baseline_from_json(d: dict[str, Any]) -> BaselineTimes | None:
    """A recorded baseline (None when it lacks what every BaselineTimes has), read as BaselineTimes reads one."""
    if not {"device", "variants", "label"} <= set(d):
        return None
    return BaselineTimes.from_json(d)
