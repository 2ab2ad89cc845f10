"""Measurements taken from a recorded run, so `llm.replay=RUN_DIR` re-runs a search exactly.

Model answers alone do not make a re-run exact: timings differ from run to run, and prompts carry them.
With `llm.replay_measurements=true` (the default with replay) every baseline, evaluation and side-by-side
re-measurement the search asks for is answered from the recording, in the order it was recorded for that
kernel. Anything the recording lacks is measured for real and announced, never invented.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ksearch.store.records as R
from ksearch.eval.report import BaselineTimes, EvalReport
from ksearch.store.journal import read_records


def recorded_generators(recording: Path) -> dict[str, int]:
    """The code generators' versions the recorded run started with ({}: recorded before they had versions,
    i.e. version 1 of each)."""
    records, _ = read_records(Path(recording) / "journal.jsonl")
    first = records[0] if records else None
    return dict(first.generators or {}) if isinstance(first, R.RunStart) else {}


class RecordedEvaluator:
    def __init__(self, recording: Path, live: Callable[[], Any], notify: Callable[[str], None] = print):
        records, _ = read_records(Path(recording) / "journal.jsonl")
        if not records:
            raise FileNotFoundError(f"llm.replay={recording} holds no journal to replay")
        self.source = str(recording)
        self._baselines = [r.value for r in R.of_kind(records, R.Baseline)]
        self._evals: dict[str, deque[dict[str, Any]]] = defaultdict(deque)
        self._remeasures: dict[tuple[str, ...], deque[list[dict[str, Any]]]] = defaultdict(deque)
        for r in records:
            if isinstance(r, R.Evaluation) and r.solution_id:
                self._evals[r.solution_id].append(r.value)
            elif isinstance(r, R.Remeasure):
                self._remeasures[tuple(r.solution_ids)].append(r.reports)
            elif isinstance(r, R.Validate) and r.solution_id:      # held-out set (eval.validate)
                self._evals[f"{r.solution_id}@validate"].append(r.value)
        self._live_factory = live
        self._live: Any = None
        self._notify = notify
        self.live_measurements = 0

    def _real(self) -> Any:
        if self._live is None:
            self._live = self._live_factory()
        self.live_measurements += 1
        return self._live

    def measure_baselines(self, workloads: list[Any], time_reference: bool = False) -> BaselineTimes:
        # the recorded baseline of these workloads (a run records one per set: feedback, validate)
        names = {w.name for w in workloads}
        for b in self._baselines:
            if names <= set(BaselineTimes.from_json(b).best()):
                return BaselineTimes.from_json(b)
        if self._baselines:
            return BaselineTimes.from_json(self._baselines[0])
        self._notify(f"replay: {self.source} recorded no baseline; measuring it")
        return self._real().measure_baselines(workloads)

    def _recorded(self, solution_id: str) -> EvalReport | None:
        queue = self._evals.get(solution_id)
        if queue:
            value = queue.popleft() if len(queue) > 1 else queue[0]
            return EvalReport.from_json(value)
        self._notify(f"replay: kernel {solution_id} is not in {self.source}; measuring it (the run diverged)")
        return None

    def evaluate(self, source: str, solution_id: str, workloads: list[Any],
                 baseline: BaselineTimes | None) -> EvalReport:
        got = self._recorded(solution_id)
        return got if got is not None else self._real().evaluate(source, solution_id, workloads, baseline)

    def confirm(self, source: str, solution_id: str, workloads: list[Any],
                baseline: BaselineTimes | None) -> EvalReport:
        """A recorded validation (keyed SOLUTION@validate), else a live held-out confirmation."""
        got = self._recorded(solution_id)
        return got if got is not None else self._real().confirm(source, solution_id, workloads, baseline)

    def remeasure(self, entries: list[tuple[str, str]], workloads: list[Any],
                  baseline: BaselineTimes | None) -> list[EvalReport]:
        key = tuple(sid for _, sid in entries)
        queue = self._remeasures.get(key)
        if queue:
            value = queue.popleft() if len(queue) > 1 else queue[0]
            return [EvalReport.from_json(v) for v in value]
        self._notify(f"replay: no recorded re-measurement of {', '.join(key)}; measuring")
        return self._real().remeasure(entries, workloads, baseline)

    def close(self) -> None:
        if self._live is not None:
            self._live.close()
