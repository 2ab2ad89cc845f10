"""The run state: what a run's journal records say, applied in order by one class.

The search (planner/) decides and writes a record; `RunState.apply` then makes the record's effect: a
new best, an evaluation counted, a cycle closed, model spend, a baseline, a settings change. A live run
applies each record as it is written, a resumed run applies the same records as it replays them (a
replay of another run, llm.replay=RUN_DIR, is such a run whose answers come from that run's records),
and `show`, `report`, export and a fork read a finished or running run by folding its file's records
into a fresh RunState (store/history.py). So they all see one state, made by one piece of code.

Two parts of the live state are not records. The tree is edited by the search through its own class
(ksearch/world_model) between records, and every batch of edits ends with a `tree` snapshot: readers of
the file see the tree as of its last snapshot (`snapshot`, `world_model()`), the search the tree being
edited (`tree`). And the round labels that cycles side by side reserve are the loop's to hand out
(`Rounds.reserve`); rounds *used* are the fold's.

Order: the owner applies a cycle's own records (its model replies and evaluations, written by the
cycle's thread when search.parallel > 1) when it applies the cycle, in cycle order; a reader of the file
applies them where they are in the file. The sums, counts and bests come out the same either way; only
the order of `evaluations` can differ, and the per-region board (the search's alone, `regions`) is fed in
the owner's order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import ksearch.store.records as R
from ksearch.eval.report import BaselineTimes, EvalReport
from ksearch.store.best_manifest import BestMember
from ksearch.store.short_ids import ShortIds
from ksearch.world_model import WorldModel


class RegionObserver(Protocol):
    """The search's per-region incumbents (planner/regions.py): fed every evaluation of a node's step."""

    def observe(self, solution_id: str, report: EvalReport, node_id: str = "?") -> list[str]: ...


@dataclass
class Spend:
    """Model usage so far (replayed requests included: they were paid for when first asked)."""

    requests: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, usage: dict[str, Any]) -> None:
        if usage.get("cached"):
            self.cached += 1
            return
        self.requests += 1
        self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.completion_tokens += int(usage.get("completion_tokens") or 0)
        self.cost_usd += float(usage.get("cost_usd") or 0.0)

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "cached": self.cached, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cost_usd": self.cost_usd}


@dataclass
class ModelUsage:
    """Totals over the model records, for the views. Replayed answers are recorded once, so nothing is
    counted twice; a replayed (cached) answer counts as a request here, unlike in `Spend`."""

    requests: int = 0
    cost_usd: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    by_model: dict[str, int] = field(default_factory=dict, init=False)
    by_purpose: dict[str, int] = field(default_factory=dict, init=False)

    def add(self, model: str, purpose: str, usage: dict[str, Any]) -> None:
        self.requests += 1
        self.by_model[model] = self.by_model.get(model, 0) + 1
        self.by_purpose[purpose] = self.by_purpose.get(purpose, 0) + 1
        self.cost_usd += _num(usage.get("cost_usd"))
        prompt, completion = int(_num(usage.get("prompt_tokens"))), int(_num(usage.get("completion_tokens")))
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.total_tokens += int(_num(usage.get("total_tokens"))) or prompt + completion


class Best:
    """The incumbent: a `best` record and the measurement it was chosen on (a near-tie's re-measurement
    when there was one)."""

    def __init__(self, record: R.BestRecord, report: dict[str, Any]):
        self.record, self.report = record, report

    @property
    def score(self) -> float:
        return float(self.record.score or 0.0)

    @property
    def solution_id(self) -> str:
        return self.record.solution_id

    @property
    def node_id(self) -> str:
        return self.record.node_id

    @property
    def round_index(self) -> int:
        return self.record.round

    @property
    def validate_score(self) -> float | None:
        """The geomean on the held-out set (None: validation off, or the set has no baseline)."""
        return self.record.validate_score

    @property
    def validate_set(self) -> str | None:
        return self.record.validate_set

    def to_json(self) -> dict[str, Any]:
        """As run_end records it."""
        return {"score": self.score, "solution_id": self.solution_id, "node_id": self.node_id,
                "round_index": self.round_index, "report": self.report, "validate_score": self.validate_score,
                "validate_set": self.validate_set}


@dataclass
class Rounds:
    """The round budget (one round = one code request + one evaluation), its only owner.

    One cycle at a time, round labels follow the rounds used. Cycles side by side each reserve up to
    max_rounds_per_cycle labels when they start (near the end of the budget, a fair share of what is
    left) and give the reservation back when applied, so search.max_rounds is never overrun; labels of a
    reservation a cycle did not use are skipped."""

    next: int = 1                 # the next round label to hand out
    used: int = 0                 # rounds of applied cycles (the fold counts them at each cycle's close)
    reserved: int = 0             # rounds held by cycles in flight

    def free(self, max_rounds: int) -> int:
        return max(0, max_rounds - self.used - self.reserved)

    def stop_reason(self, max_rounds: int, side_by_side: bool) -> str | None:
        spent = self.free(max_rounds) <= 0 if side_by_side else self.next > max_rounds
        return "round budget used" if spent else None

    def fits(self, attempts: int, per_cycle: int, max_rounds: int) -> bool:
        """One cycle at a time: whether a cycle that made `attempts` may make another."""
        return attempts < per_cycle and self.next + attempts <= max_rounds

    def advance(self, attempts: int) -> None:
        """One cycle at a time: a closed cycle's rounds are its labels."""
        self.next += max(1, attempts)

    def share(self, per_cycle: int, max_rounds: int, slots: int) -> int:
        """Side by side: the rounds a new cycle may take (the rounds left shared among the slots)."""
        return min(per_cycle, max(1, -(-self.free(max_rounds) // slots)))

    def reserve(self, cap: int) -> None:
        self.next += cap
        self.reserved += cap

    def release(self, cap: int) -> None:
        self.reserved -= cap


class RunState:
    """The run as its records say so far; `apply` folds one record in (see the module doc)."""

    def __init__(self, regions: RegionObserver | None = None):
        self.regions = regions                                 # only the search keeps a region board
        self.start: R.RunStart | None = None
        self.config: dict[str, Any] | None = None              # the settings in effect (run_start, then changes)
        self.config_changes: list[R.ConfigChange] = []
        self.fork: R.Fork | None = None
        self.baselines: dict[str, BaselineTimes] = {}          # by key, DEVICE:SET:SEED
        self.baseline: BaselineTimes | None = None             # the search set's
        self.tree = WorldModel()                               # the search's tree (see the module doc)
        self.snapshot: dict[str, Any] | None = None            # the last tree snapshot
        self.short_ids = ShortIds()
        self.evaluations: list[R.Evaluation] = []
        self.reports: dict[tuple[str, int], dict[str, Any]] = {}        # (solution, round) -> latest report
        self.validate_reports: dict[tuple[str, int], dict[str, Any]] = {}
        self.best: Best | None = None
        self.bests: list[R.BestRecord] = []
        self.validated: EvalReport | None = None               # the best's report on the held-out set
        self.dispatches: list[R.Dispatch] = []
        self.spend = Spend()
        self.usage = ModelUsage()
        self.rounds = Rounds()
        self.cycles = 0                                        # cycle ids handed out
        self._open: deque[int] = deque()                       # cycles started and not closed, in order
        self._attempts: dict[int, int] = {}                    # attempts applied per open cycle
        self.stop: str | None = None                           # None until a run_end (and after a resume)
        self.ended_at: float | None = None

    def apply(self, rec: R.Record) -> None:
        handler = _HANDLERS.get(type(rec))
        if handler is not None:
            handler(self, rec)
        if self.stop is not None and not isinstance(rec, (R.RunEnd, R.TreeSnapshot)):
            self.stop = self.ended_at = None      # a resume went on after this end (e.g. a larger budget)

    # ---- what the search reads -----------------------------------------------------------------------
    def world_model(self) -> WorldModel | None:
        """The last tree snapshot as a WorldModel, or None before the model has built one."""
        return WorldModel.from_json(self.snapshot) if self.snapshot is not None else None

    def member(self, solution_id: str, node_id: str, regions: tuple[str, ...] = (),
               fallback: bool = False) -> BestMember:
        """How best/manifest.json names the node that produced a kernel of the best."""
        step = self.tree.node(node_id).step if node_id in self.tree else ""
        return BestMember(solution_id, node_id, self.short_ids.short(node_id), step, regions, fallback)

    @property
    def evaluation_count(self) -> int:
        return len(self.evaluations)

    # ---- the records ---------------------------------------------------------------------------------
    def _run_start(self, rec: R.RunStart) -> None:
        if self.start is None:
            self.start, self.config = rec, rec.config

    def _config(self, rec: R.ConfigChange) -> None:
        self.config_changes.append(rec)
        self.config = rec.config or self.config

    def _baseline(self, rec: R.Baseline) -> None:
        times = rec.times
        if times is None:
            return
        self.baselines[rec.key] = times
        search_set = self.start.workload_set if self.start is not None else None
        if self.baseline is None or (search_set and rec.workload_set == search_set):
            self.baseline = times

    def _model(self, rec: R.ModelCall) -> None:
        self.spend.add(rec.usage)
        self.usage.add(str(rec.value.get("model") or "?"), rec.purpose, rec.usage)

    def _model_failed(self, rec: R.ModelFailed) -> None:
        self.spend.add(rec.usage)

    def _evaluation(self, rec: R.Evaluation) -> None:
        if not rec.value:
            return
        self.evaluations.append(rec)
        self.reports[(rec.solution_id, rec.round)] = rec.value
        if rec.cycle is not None:
            self._attempts[rec.cycle] = self._attempts.get(rec.cycle, 0) + 1
        if self.regions is not None and rec.node_id != "dispatch":     # a dispatch is no node's step
            self.regions.observe(rec.solution_id, rec.report, rec.node_id)

    def _remeasure(self, rec: R.Remeasure) -> None:
        for sid, report in zip(rec.solution_ids, rec.reports):
            self.reports[(sid, rec.round)] = report

    def _validate(self, rec: R.Validate) -> None:
        self.validate_reports[(rec.solution_id, rec.round)] = rec.value

    def _verdict(self, rec: R.ValidateVerdict) -> None:
        value = self.validate_reports.get((rec.solution_id, rec.round))
        if rec.accepted and value is not None:
            self.validated = R.report_from_json(value)
            self.validated.solution_id = rec.solution_id

    def _select(self, rec: R.Select) -> None:
        self.cycles = rec.cycle if rec.cycle is not None else self.cycles + 1
        self._open.append(self.cycles)

    def _bad_code(self, rec: R.BadCode) -> None:
        if self._open:             # the owner applies the oldest cycle in flight
            self._attempts[self._open[0]] = self._attempts.get(self._open[0], 0) + 1

    def _closed(self, rec: R.Attach | R.CycleFailed) -> None:
        attempts = self._attempts.pop(self._open.popleft(), 0) if self._open else 0
        self.rounds.used += max(1, attempts)

    def _best(self, rec: R.BestRecord) -> None:
        if rec.score is None:
            return
        report = self.reports.get((rec.solution_id, rec.round))
        self.best = Best(rec, R.report_from_json(report).to_json() if report is not None else {})
        self.bests.append(rec)

    def _dispatch(self, rec: R.Dispatch) -> None:
        self.dispatches.append(rec)

    def _tree(self, rec: R.TreeSnapshot) -> None:
        if rec.tree:
            self.snapshot = rec.tree
            self.short_ids.add_snapshot(rec.tree)

    def _fork(self, rec: R.Fork) -> None:
        self.fork = rec
        seed = rec.seed or {}
        if isinstance(seed.get("tree"), dict):
            self.tree = WorldModel.from_json(seed["tree"])
        if rec.carried_over:
            for sid, report in (seed.get("reports") or {}).items():
                self.reports[(sid, 0)] = report

    def _run_end(self, rec: R.RunEnd) -> None:
        self.stop, self.ended_at = str(rec.stop or "ended"), rec.t


_HANDLERS: dict[type, Callable[[RunState, Any], None]] = {
    R.RunStart: RunState._run_start, R.ConfigChange: RunState._config, R.Baseline: RunState._baseline,
    R.ModelCall: RunState._model, R.ModelFailed: RunState._model_failed, R.Evaluation: RunState._evaluation,
    R.Remeasure: RunState._remeasure, R.Validate: RunState._validate, R.ValidateVerdict: RunState._verdict,
    R.Select: RunState._select, R.BadCode: RunState._bad_code, R.Attach: RunState._closed,
    R.CycleFailed: RunState._closed, R.BestRecord: RunState._best, R.Dispatch: RunState._dispatch,
    R.TreeSnapshot: RunState._tree, R.Fork: RunState._fork, R.RunEnd: RunState._run_end,
}


def fold(records: list[R.Record], regions: RegionObserver | None = None) -> RunState:
    """A RunState with `records` applied in order."""
    state = RunState(regions)
    for rec in records:
        state.apply(rec)
    return state


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0
