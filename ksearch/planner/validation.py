"""Held-out confirmation of a new best: the search selects on its feedback set, `validate` must agree.

A kernel tuned on five small shapes can collapse on shapes it never saw (a 0.07x on one long sequence
hides under a 0.93x geomean of the feedback set). So a candidate that beats the incumbent on the
feedback set is also evaluated on a held-out workload set (`eval.validate`: "auto" = the task's
`validate` set on a GPU and `validate_cpu` on a CPU; "none" = off; or any set name), and it becomes the
best only when:

1. it passes every validate workload (correct on shapes it was not selected on; without a baseline for
   the set, e.g. a replay of a run that never measured one, correctness alone decides), and
2. its validate geomean does not regress against the incumbent's: `compare_reports(candidate,
   incumbent)` on the validate reports is not "worse" (a drop beyond the measured noise fails; a tie
   passes). With no incumbent validate score (the first passing kernel) condition 1 is enough.

Journal records: the measurement is a memo of kind "validate" (key `SOLUTION@ROUND`, fields
`solution_id`, `round`, `set`, `value` = the validate EvalReport as JSON), and the decision an event of
kind "validate_verdict" (`solution_id`, `accepted`, `score` = feedback geomean, `validate_score`,
`incumbent_validate_score`, `set`, `basis`). The validate set's baseline is a "baseline" memo keyed
`DEVICE:SET:SEED`, measured on first use. Runs recorded before this existed (their run_start config has
no eval.validate) replay with validation off, so they resume unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ksearch.eval.clocks.noise import compare_reports
from ksearch.eval.report import BaselineTimes, EvalReport
from ksearch.store.rundir import atomic_write
from ksearch.task import Task, Workload

OFF = ("none", "off", "", None)
#: The set "auto" picks per device.
AUTO_SETS = {"gpu": "validate", "cpu": "validate_cpu"}


@dataclass
class Verdict:
    accepted: bool
    basis: str
    report: EvalReport | None = None       # the candidate's validate report (None when validation is off)


def resolve_set(setting: str | None, task: Task, device: str, feedback_set: str) -> str | None:
    """The validate set name for this setting, or None (off, or the task has no such set).

    An explicit set that the task lacks, or one equal to the feedback set, is an error (a held-out set
    that is the selection set confirms nothing).
    """
    if setting in OFF or str(setting).lower() in ("none", "off"):
        return None
    sets = task.workload_sets()
    if setting == "auto":
        name = AUTO_SETS["gpu" if device.startswith("cuda") else "cpu"]
        return name if name in sets and name != feedback_set else None
    if setting not in sets:
        raise ValueError(f"eval.validate={setting}: task {task.name} has no workload set {setting!r}; it has "
                         f"{sorted(sets)} (or use auto / none)")
    if setting == feedback_set:
        raise ValueError(f"eval.validate={setting} is the set the search selects on; pick a held-out set "
                         f"(auto picks {AUTO_SETS}) or none")
    return setting


def recorded_before_validation(journal: Any) -> bool:
    """True for a run whose first segment was recorded before eval.validate existed (replay it without)."""
    first = journal.recorded[0] if getattr(journal, "recorded", None) else None
    if not first or first.get("kind") != "run_start" or not isinstance(first.get("config"), dict):
        return False
    return "validate" not in (first["config"].get("eval") or {})


class Validation:
    """Confirms new bests on the held-out set; keeps the incumbent's validate report."""

    def __init__(self, set_name: str | None, workloads: list[Workload], *, journal: Any, evaluator: Any,
                 device: str, seed: int, load_source: Callable[[str], str], best_dir: Path | None = None,
                 message: Callable[[str], None] = lambda _: None):
        self.set_name = set_name
        self.workloads = workloads
        self.journal, self.evaluator = journal, evaluator
        self.device, self.seed = device, seed
        self.load_source = load_source
        self.best_dir = best_dir
        self.message = message
        self.baseline: BaselineTimes | None = None
        self.incumbent: EvalReport | None = None        # the current best's validate report

    @property
    def enabled(self) -> bool:
        return self.set_name is not None and bool(self.workloads)

    @staticmethod
    def for_search(cfg: Any, task: Task, device: str, feedback_set: str, journal: Any, evaluator: Any,
                   run_dir: Any, message: Callable[[str], None]) -> "Validation":
        setting = cfg.eval.get("validate", "auto") if hasattr(cfg.eval, "get") else getattr(cfg.eval, "validate", "auto")
        name = None if recorded_before_validation(journal) else resolve_set(setting, task, device, feedback_set)
        workloads = task.workload_set(name) if name else []
        return Validation(name, workloads, journal=journal, evaluator=evaluator, device=device,
                          seed=int(cfg.run.seed), load_source=lambda sid: run_dir.load_solution(sid).main_source,
                          best_dir=run_dir.path / "best", message=message)

    # ---- measurements, through the journal --------------------------------------------------------
    def _baseline(self) -> BaselineTimes:
        if self.baseline is None:
            key = f"{self.device}:{self.set_name}:{self.seed}"
            self.baseline = BaselineTimes.from_json(self.journal.memo(
                "baseline", key, lambda: self.evaluator.measure_baselines(self.workloads).to_json()))
        return self.baseline

    def measure(self, solution_id: str, round_index: int) -> EvalReport:
        baseline = self._baseline()
        source = self.load_source(solution_id)

        def compute() -> dict[str, Any]:
            return self.evaluator.evaluate(source, f"{solution_id}@validate", self.workloads, baseline).to_json()

        value = self.journal.memo("validate", f"{solution_id}@{round_index}", compute, round=round_index,
                                  solution_id=solution_id, set=self.set_name)
        report = EvalReport.from_json(value)
        report.solution_id = solution_id
        return report

    # ---- the rule -----------------------------------------------------------------------------------
    def confirm(self, feedback: EvalReport, solution_id: str, round_index: int) -> Verdict:
        """Measure `solution_id` on the validate set and apply the rule; journal the verdict."""
        if not self.enabled:
            return Verdict(True, "validation off")
        report = self.measure(solution_id, round_index)
        inc = self.incumbent
        if not report.passed:
            accepted, basis = False, f"failed on {self.set_name}: {report.summary()}"
        elif report.score is None:
            accepted, basis = True, f"passed {self.set_name} (no baseline to score it against)"
        elif inc is None or not inc.passed or inc.score is None:
            accepted, basis = True, f"passed {self.set_name} (no incumbent {self.set_name} score)"
        else:
            verdict = compare_reports(report, inc)
            accepted = verdict != "worse"
            basis = (f"{self.set_name} {report.score:.4g} vs incumbent {inc.score:.4g}: {verdict}"
                     + ("" if accepted else " (regressed beyond the noise)"))
        self.journal.event("validate_verdict", check={"solution_id": solution_id, "accepted": accepted},
                           round=round_index, set=self.set_name, score=feedback.score,
                           validate_score=report.score,
                           incumbent_validate_score=inc.score if inc is not None else None, basis=basis)
        if accepted:
            self.incumbent = report
            self._write_best(report)
        else:
            self.message(f"not the best: {basis}")
        return Verdict(accepted, basis, report)

    def _write_best(self, report: EvalReport) -> None:
        """best/validate_report.json next to best/report.json (rewritten with every new best)."""
        if self.best_dir is None:
            return
        self.best_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(self.best_dir / "validate_report.json", json.dumps(report.to_json(), indent=1))
