"""The incumbent: the global best kernel, replaced only by one that is faster beyond the noise.

A candidate within the noise of the best (a near-tie) that looks faster is re-measured side by side
with the best in one job, so drift hits both equally; only then can it win, and only when the held-out
gate agrees (planner/validation.py). Every decision is journaled (`best` or `not_best` with the basis;
the run state's best is what the `best` records say), and best/ in the run directory always holds the
incumbent: the kernel, its report, its held-out report and best/manifest.json naming the node (or the
nodes of a shape dispatch) that produced it (ksearch/store/best_manifest.py). Nothing else writes best/.
"""

from __future__ import annotations

import json

from ksearch.eval.clocks.noise import compare_reports
from ksearch.eval.report import EvalReport
from ksearch.instantiate import Solution
from ksearch.planner.recorder import Recorder
from ksearch.planner.settings import Segments
from ksearch.planner.validation import Validation
from ksearch.store import records as R
from ksearch.store.best_manifest import BestKind, BestManifest, BestMember, Measured
from ksearch.store.rundir import atomic_write
from ksearch.store.state import Best


class Incumbent:
    def __init__(self, recorder: Recorder, gate: Validation, settings: Segments):
        self.recorder, self.gate, self.settings = recorder, gate, settings

    @property
    def best(self) -> Best | None:
        return self.recorder.state.best

    def consider(self, report: EvalReport, solution_id: str, node_id: str, round_index: int) -> None:
        """A new global best only when it is faster beyond the noise; near-ties are re-measured together."""
        if not report.passed or report.score is None:
            return
        cfg = self.settings.cfg
        margin = cfg.search.improvement_margin
        # on a CPU the interpreter's times only order kernels: a side-by-side re-measurement there costs more
        # than it can tell
        remeasure_ties = cfg.eval.remeasure_near_ties and self.recorder.target.device.startswith("cuda")
        best = self.best
        basis = "first passing kernel"
        if best is not None:
            verdict = compare_reports(report, EvalReport.from_json(best.report), margin)
            basis = f"{verdict} on first measurement"
            if verdict == "tie" and report.score > best.score and remeasure_ties and solution_id != best.solution_id:
                inc2, new2 = self.recorder.remeasure([best.solution_id, solution_id], round_index)
                if inc2.passed and new2.passed and inc2.score is not None and new2.score is not None:
                    verdict = compare_reports(new2, inc2, margin)
                    basis = f"{verdict} when re-measured side by side ({new2.score:.4g} vs {inc2.score:.4g})"
                    if verdict == "better":
                        report = new2
                else:
                    verdict, basis = "worse", "failed when re-measured: " + (new2.summary() if not new2.passed
                                                                             else inc2.summary())
            if verdict != "better":
                self.recorder.write(R.NotBest(solution_id=solution_id, score=report.score,
                                              incumbent=best.solution_id, basis=basis))
                return
        assert report.score is not None
        validated = None
        if self.gate.enabled:
            confirmed = self.gate.confirm(report, solution_id, round_index)
            if not confirmed.accepted:
                self.recorder.write(R.NotBest(solution_id=solution_id, score=report.score,
                                              incumbent=best.solution_id if best else None,
                                              basis=f"{basis}; {confirmed.basis}"))
                return
            validated = confirmed.report
        record = R.BestRecord(solution_id=solution_id, score=report.score, node_id=node_id, round=round_index,
                              basis=basis, validate_score=validated.score if validated else None,
                              validate_set=self.gate.set_name if self.gate.enabled else None)
        self.replace(record, self.recorder.run_dir.load_solution(solution_id), report,
                     (self.member(solution_id, node_id),), validated)

    def member(self, solution_id: str, node_id: str, regions: tuple[str, ...] = (),
               fallback: bool = False) -> BestMember:
        """How best/manifest.json names the node that produced a kernel of the best."""
        return self.recorder.state.member(solution_id, node_id, regions, fallback)

    def replace(self, record: R.BestRecord, solution: Solution, report: EvalReport,
                members: tuple[BestMember, ...], validated: EvalReport | None = None) -> None:
        """Make `solution` the best: record it, then write best/ (the kernel, its report, its held-out report
        and the manifest; a dispatch when it has several members)."""
        self.recorder.write(record)
        kind = BestKind.DISPATCH if len(members) > 1 else BestKind.KERNEL
        best = self.recorder.run_dir.path / "best"
        if validated is not None:          # next to best/report.json, rewritten with every new best
            best.mkdir(parents=True, exist_ok=True)
            atomic_write(best / "validate_report.json", json.dumps(validated.to_json(), indent=1))
        self.recorder.run_dir.write_best(solution, report.to_json(), manifest(
            kind, report, record.solution_id, record.round, members, solution.language, record.validate_score,
            record.validate_set))


def manifest(kind: BestKind, report: EvalReport, solution_id: str, round_index: int,
             members: tuple[BestMember, ...], language: str, validate_score: float | None,
             validate_set: str | None) -> BestManifest:
    """best/manifest.json for a new best (see ksearch/store/best_manifest.py)."""
    assert report.score is not None
    measured = Measured(report.score, report.score_name or "score", report.baseline, validate_score, validate_set)
    return BestManifest(kind, solution_id, round_index, members, measured,
                        "solution.cu" if language == "cuda" else "solution.py")
