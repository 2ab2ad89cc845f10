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

Journal records (store/records.py): the measurement is a `Validate` answer (key `SOLUTION@ROUND`), the
decision a `ValidateVerdict`; the run state keeps the incumbent's validate report (the last accepted
one). The validate set's baseline is a `Baseline` answer keyed `DEVICE:SET:SEED`, measured on first use.
An accepted kernel's validate report goes to best/validate_report.json when the incumbent takes it
(planner/incumbent.py). Runs recorded before this existed (their run_start config has no eval.validate)
replay with validation off, so they resume unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ksearch.eval.clocks.noise import compare_reports
from ksearch.eval.report import BaselineTimes, EvalReport
from ksearch.planner.recorder import Recorder, Target
from ksearch.store import records as R
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
    if not isinstance(first, R.RunStart) or first.config is None:
        return False
    return "validate" not in (first.config.get("eval") or {})


class Validation:
    """Confirms new bests on the held-out set, through the recorder; the run state keeps the incumbent's
    validate report."""

    def __init__(self, set_name: str | None, workloads: list[Workload], recorder: Recorder, seed: int,
                 message: Callable[[str], None] = lambda _: None):
        self.set_name = set_name
        self.workloads = workloads
        self.recorder = recorder
        self.seed = seed
        self.message = message

    @property
    def enabled(self) -> bool:
        return self.set_name is not None and bool(self.workloads)

    @staticmethod
    def for_search(cfg: Any, target: Target, recorder: Recorder, message: Callable[[str], None]) -> Validation:
        setting = cfg.eval.get("validate", "auto") if hasattr(cfg.eval, "get") else getattr(cfg.eval, "validate", "auto")
        name = None if recorded_before_validation(recorder.journal) else \
            resolve_set(setting, target.task, target.device, target.workload_set)
        workloads = target.task.workload_set(name) if name else []
        return Validation(name, workloads, recorder, int(cfg.run.seed), message)

    # ---- measurements, through the journal --------------------------------------------------------
    def _baseline(self) -> BaselineTimes:
        key = f"{self.recorder.target.device}:{self.set_name}:{self.seed}"
        known = self.recorder.state.baselines.get(key)
        return known if known is not None else self.recorder.baseline(key, self.workloads)

    def measure(self, solution_id: str, round_index: int) -> EvalReport:
        baseline = self._baseline()
        source = self.recorder.source(solution_id) or ""

        def compute() -> dict[str, Any]:
            return self.recorder.evaluator.confirm(source, f"{solution_id}@validate", self.workloads,
                                                   baseline).to_json()

        rec = self.recorder.answer(R.Validate(key=f"{solution_id}@{round_index}", round=round_index,
                                              solution_id=solution_id, set=self.set_name), compute)
        report = EvalReport.from_json(rec.value)
        report.solution_id = solution_id
        return report

    # ---- the rule -----------------------------------------------------------------------------------
    def confirm(self, feedback: EvalReport, solution_id: str, round_index: int) -> Verdict:
        """Measure `solution_id` on the validate set and apply the rule; record the verdict."""
        if not self.enabled:
            return Verdict(True, "validation off")
        report = self.measure(solution_id, round_index)
        inc = self.recorder.state.validated
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
        self.recorder.write(R.ValidateVerdict(
            solution_id=solution_id, accepted=accepted, round=round_index, set=self.set_name, score=feedback.score,
            validate_score=report.score, incumbent_validate_score=inc.score if inc is not None else None,
            basis=basis))
        if not accepted:
            self.message(f"not the best: {basis}")
        return Verdict(accepted, basis, report)
