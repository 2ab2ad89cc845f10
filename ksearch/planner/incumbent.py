"""The incumbent: the global best kernel, replaced only by one that is faster beyond the noise.

A candidate within the noise of the best (a near-tie) that looks faster is re-measured side by side
with the best in one job, so drift hits both equally; only then can it win. Every decision is journaled
(`best` or `not_best` with the basis), and best/ in the run directory always holds the incumbent, with
best/manifest.json naming the node that produced it (ksearch/store/best_manifest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ksearch.eval.clocks.noise import compare_reports
from ksearch.eval.report import EvalReport
from ksearch.store import Journal, RunDir
from ksearch.store.best_manifest import BestKind, BestManifest, BestMember


@dataclass
class Best:
    score: float
    solution_id: str
    node_id: str
    round_index: int
    report: dict[str, Any]
    validate_score: float | None = None   # geomean on the held-out validate set (None: off or unscored)
    validate_set: str | None = None


class Incumbent:
    def __init__(self, journal: Journal, run_dir: RunDir,
                 remeasure: Callable[[list[str], int], list[EvalReport]], validation: Any = None, *,
                 member: Callable[[str, str], BestMember]):
        self.journal, self.run_dir, self._remeasure = journal, run_dir, remeasure
        self.validation = validation       # ksearch.planner.validation: a new best must hold on held-out shapes
        # (solution id, node id) -> how best/manifest.json names that node (short id, step)
        self.member = member
        self.best: Best | None = None

    @property
    def score(self) -> float | None:
        return self.best.score if self.best else None

    def consider(self, report: EvalReport, solution_id: str, node_id: str, round_index: int, *,
                 margin: float, remeasure_ties: bool, have_code: Callable[[str], bool]) -> None:
        """A new global best only when it is faster beyond the noise; near-ties are re-measured together."""
        if not report.passed or report.score is None:
            return
        basis = "first passing kernel"
        if self.best is not None:
            incumbent = EvalReport.from_json(self.best.report)
            verdict = compare_reports(report, incumbent, margin)
            basis = f"{verdict} on first measurement"
            if verdict == "tie" and report.score > self.best.score and remeasure_ties \
                    and have_code(self.best.solution_id) and solution_id != self.best.solution_id:
                inc2, new2 = self._remeasure([self.best.solution_id, solution_id], round_index)
                if inc2.passed and new2.passed and inc2.score is not None and new2.score is not None:
                    verdict = compare_reports(new2, inc2, margin)
                    basis = f"{verdict} when re-measured side by side ({new2.score:.4g} vs {inc2.score:.4g})"
                    if verdict == "better":
                        report = new2
                else:
                    verdict, basis = "worse", "failed when re-measured: " + (new2.summary() if not new2.passed
                                                                             else inc2.summary())
            if verdict != "better":
                self.journal.event("not_best", check={"solution_id": solution_id}, score=report.score,
                                   incumbent=self.best.solution_id, basis=basis)
                return
        assert report.score is not None
        validate_score, validate_set = None, None
        if self.validation is not None and self.validation.enabled:
            confirmed = self.validation.confirm(report, solution_id, round_index)
            if not confirmed.accepted:
                self.journal.event("not_best", check={"solution_id": solution_id}, score=report.score,
                                   incumbent=self.best.solution_id if self.best else None,
                                   basis=f"{basis}; {confirmed.basis}")
                return
            validate_score = confirmed.report.score if confirmed.report else None
            validate_set = self.validation.set_name
        self.best = Best(report.score, solution_id, node_id, round_index, report.to_json(), validate_score,
                         validate_set)
        self.journal.event("best", check={"solution_id": solution_id}, score=report.score, node_id=node_id,
                           round=round_index, basis=basis, validate_score=validate_score,
                           validate_set=validate_set)
        solution = self.run_dir.load_solution(solution_id)
        self.run_dir.write_best(solution, report.to_json(), manifest(
            BestKind.KERNEL, report, solution_id, round_index, (self.member(solution_id, node_id),),
            solution.language, validate_score, validate_set))


def manifest(kind: BestKind, report: EvalReport, solution_id: str, round_index: int,
             members: tuple[BestMember, ...], language: str, validate_score: float | None,
             validate_set: str | None) -> BestManifest:
    """best/manifest.json for a new best (see ksearch/store/best_manifest.py)."""
    assert report.score is not None
    return BestManifest(kind, report.score, report.score_name or "score", report.baseline, solution_id,
                        round_index, members, "solution.cu" if language == "cuda" else "solution.py",
                        validate_score, validate_set)
