"""The search's one way out: model requests, measurements and decisions, each through the journal.

A decision of the owner (the thread that runs the search) is written as a record and then applied to the
run state (`write`), so the state is what the records say. A model request or a measurement is an
answer: the journal hands back the recorded one on replay, or it is asked now and recorded. Answers the
owner asks are applied at once (`answer`); a cycle's own requests and evaluations (`ask`, `evaluate`
with its cycle id) may run in the cycle's thread and are applied by the owner when it applies the cycle.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from ksearch.eval.report import BaselineTimes, EvalReport
from ksearch.instantiate import Solution
from ksearch.knowledge.run_memory import RunMemory
from ksearch.llm.base import Model, ModelError, ModelRequest
from ksearch.store import Journal, RunDir
from ksearch.store import records as R
from ksearch.store.state import RunState
from ksearch.task import Task, Workload
from ksearch.world_model import Node

A = TypeVar("A", bound=R.Record)


class EvaluatorLike(Protocol):
    def evaluate(self, source: str, solution_id: str, workloads: list[Workload],
                 baseline: BaselineTimes | None) -> EvalReport: ...

    def confirm(self, source: str, solution_id: str, workloads: list[Workload],
                baseline: BaselineTimes | None) -> EvalReport: ...

    def measure_baselines(self, workloads: list[Workload]) -> BaselineTimes: ...

    def remeasure(self, entries: list[tuple[str, str]], workloads: list[Workload],
                  baseline: BaselineTimes | None) -> list[EvalReport]: ...


class Progress(Protocol):
    def round_started(self, round_index: int, max_rounds: int, node: Node, attempt: int, mode: str,
                      short_id: str | None = None) -> None: ...
    def attempt_done(self, round_index: int, report: EvalReport, best_score: float | None) -> None: ...
    def message(self, text: str) -> None: ...


class NullProgress:
    def round_started(self, *a: Any) -> None: ...
    def attempt_done(self, *a: Any) -> None: ...
    def message(self, text: str) -> None: ...


@dataclass(frozen=True)
class Target:
    """What is searched, and where it is measured."""

    task: Task
    workloads: list[Workload]              # the feedback set the search selects on
    workload_set: str
    device: str


@dataclass(frozen=True)
class Services:
    """The search's outside world: who writes the code, who measures it, who watches."""

    model: Model
    evaluator: EvaluatorLike
    progress: Progress = field(default_factory=NullProgress)
    memory: RunMemory | None = None          # the knowledge store across runs (None: memory off)
    # the code generators' versions a new run writes with (None: this ksearch's; a replay of a recorded run
    # passes the recording's, so the kernels it composes come out the same)
    generators: dict[str, int] | None = None


class Recorder:
    def __init__(self, journal: Journal, state: RunState, run_dir: RunDir, services: Services, target: Target):
        self.journal, self.state, self.run_dir = journal, state, run_dir
        self.model, self.evaluator = services.model, services.evaluator
        self.target = target
        # what earlier runs found, and where this run's evaluations are remembered (ksearch/knowledge)
        self.memory = services.memory or RunMemory.disabled(target.task)
        self._sources: dict[str, str] = {}
        self._save_lock = threading.Lock()

    # ---- the owner's records ------------------------------------------------------------------------
    def write(self, rec: A) -> A:
        """A decision (or a settings change): into the journal (matched there on replay), then the state."""
        self.journal.append(rec)
        self.state.apply(rec)
        return rec

    def answer(self, rec: A, compute: Callable[[], dict[str, Any]]) -> A:
        """An answer the owner asks: recorded (or replayed), then applied."""
        got = self.journal.memo(rec, compute)
        self.state.apply(got)
        return got

    # ---- answers, from any thread (applied by the owner) --------------------------------------------
    def ask(self, req: ModelRequest, cycle: int | None = None) -> R.ModelCall:
        """The model's answer from the journal, else asked and recorded (thread-safe with `cycle`)."""
        def compute() -> dict[str, Any]:
            try:
                reply = self.model.complete(req)
            except ModelError as e:
                # What the failed tries cost is kept (a resumed run counts it against the budget), then the
                # run stops with the error; the request itself is asked again on resume.
                failed = R.ModelFailed(key=req.key(), purpose=req.purpose, error=str(e)[:2000],
                                       usage=getattr(e, "usage", None) or {}, cycle=cycle)
                self.journal.append(failed)
                if cycle is None:
                    self.state.apply(failed)
                raise
            return {"text": reply.text, "model": reply.model, "usage": reply.usage}

        return self.journal.memo(R.ModelCall(key=req.key(), cycle=cycle, request=req.to_json()), compute)

    def evaluate(self, solution: Solution, node_id: str, attempt: int, round_index: int,
                 cycle: int | None = None) -> R.Evaluation:
        """Measure a kernel on the feedback set (recorded; in a cycle's thread when `cycle` is given)."""
        self.save(solution)
        sid = solution.solution_id

        def compute() -> dict[str, Any]:
            return self.evaluator.evaluate(solution.main_source, sid, self.target.workloads,
                                           self.state.baseline).to_json()

        rec = R.Evaluation(key=f"{sid}@{round_index}", cycle=cycle, round=round_index, node_id=node_id,
                           attempt=attempt, solution_id=sid)
        return self.journal.memo(rec, compute)

    # ---- answers the owner asks ---------------------------------------------------------------------
    def remeasure(self, sids: list[str], round_index: int) -> list[EvalReport]:
        """Time several kernels side by side in one job, so drift hits them equally (near-ties)."""
        entries = [(self.source(s) or "", s) for s in sids]

        def compute() -> dict[str, Any]:
            reports = self.evaluator.remeasure(entries, self.target.workloads, self.state.baseline)
            return {"reports": [r.to_json() for r in reports]}

        rec = self.answer(R.Remeasure(key=f"{':'.join(sids)}@{round_index}", round=round_index,
                                      solution_ids=list(sids)), compute)
        return [EvalReport.from_json(r) for r in rec.value["reports"]]

    def baseline(self, key: str, workloads: list[Workload]) -> BaselineTimes:
        """The baseline times of a workload set (keyed DEVICE:SET:SEED), measured once per run."""
        rec = self.answer(R.Baseline(key=key), lambda: self.evaluator.measure_baselines(workloads).to_json())
        return BaselineTimes.from_json(rec.value)

    # ---- the solution store -------------------------------------------------------------------------
    def save(self, solution: Solution) -> None:
        with self._save_lock:              # cycles side by side may store the same kernel
            self.run_dir.save_solution(solution)
            self._sources[solution.solution_id] = solution.main_source

    def source(self, solution_id: str | None) -> str | None:
        """A stored kernel's source, or None for no (or an unknown) solution."""
        if not solution_id:
            return None
        with self._save_lock:
            if solution_id not in self._sources:
                try:
                    self._sources[solution_id] = self.run_dir.load_solution(solution_id).main_source
                except FileNotFoundError:
                    return None
            return self._sources[solution_id]
