"""Per-region incumbents: the best kernel for each region of the shape space, and the dispatch built on them.

Every passing evaluation carries a speedup per workload; a workload's region comes from the task
(`region_of`, ksearch/task/regions.py). A kernel's score on a region is the geometric mean of its
speedups over that region's workloads, and the region's incumbent is the kernel with the highest one
(first come wins ties, so the board is a pure function of the evaluation order and replays exactly).

At the end of a search segment, when at least two kernels hold regions, `finish_with_dispatch` composes
them into one solution (ksearch/instantiate/dispatch.py) whose run() picks by shapes, with the overall
best as the fallback, and evaluates it as a whole like any candidate: on the feedback set, then through
the validate gate. It becomes the best only if it is not worse than the incumbent on feedback (a tie is
enough: dispatching adds a few host operations, which cannot be faster) and the validate gate accepts it.
Journal: the composition's evaluation is an `Evaluation` record with node_id "dispatch" and attempt 0,
and a `Dispatch` record (members, table, fallback, verdict) says what happened (store/records.py). The
dispatch step sees the search through `DispatchStep` only: the task, the board, the stored kernels, an
evaluate callable, the recorder's `write` and the incumbent, which alone decides and writes best/.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ksearch.eval.clocks.noise import compare_reports
from ksearch.eval.report import EvalReport
from ksearch.instantiate import Solution
from ksearch.store import records as R
from ksearch.task import Task, Workload
from ksearch.task.regions import region_of, scheme_of

if TYPE_CHECKING:
    from ksearch.planner.incumbent import Incumbent


@dataclass
class RegionBest:
    region: str
    solution_id: str
    score: float                         # geomean speedup over the region's workloads
    index: tuple[int, ...]               # the scheme's bucket indices (what the dispatcher compares)
    node_id: str = "?"                   # the node whose evaluation produced the kernel


@dataclass
class RegionBoard:
    """Region of each workload and the incumbent kernel per region."""

    task: Task
    workloads: list[Workload]
    regions: dict[str, str] = field(default_factory=dict)          # workload name -> region
    index: dict[str, tuple[int, ...]] = field(default_factory=dict)  # region -> bucket indices
    best: dict[str, RegionBest] = field(default_factory=dict)

    def __post_init__(self) -> None:
        scheme = scheme_of(self.task)
        for w in self.workloads:
            r = region_of(self.task, w)
            self.regions[w.name] = r
            self.index.setdefault(r, scheme.index_of_axes(dict(w.axes)))

    def region_scores(self, report: EvalReport) -> dict[str, float]:
        """Geomean speedup per region of one passing report (empty when it did not pass or is unscored)."""
        if not report.passed or not report.speedups:
            return {}
        by_region: dict[str, list[float]] = {}
        for w, s in report.speedups.items():
            if w in self.regions and s and s > 0:
                by_region.setdefault(self.regions[w], []).append(math.log(s))
        return {r: math.exp(sum(v) / len(v)) for r, v in by_region.items()}

    def observe(self, solution_id: str, report: EvalReport, node_id: str = "?") -> list[str]:
        """Take a passing evaluation (of `node_id`'s step)'s per-region scores; returns the regions it now holds."""
        won = []
        for r, s in self.region_scores(report).items():
            cur = self.best.get(r)
            if cur is None or s > cur.score:
                self.best[r] = RegionBest(r, solution_id, s, self.index[r], node_id)
                won.append(r)
        return won

    def weakest(self) -> RegionBest | None:
        """The region whose best kernel is furthest behind the baseline (lowest score)."""
        return min(self.best.values(), key=lambda b: (b.score, b.region)) if self.best else None

    def node_of(self, solution_id: str) -> str:
        """The node whose evaluation made `solution_id` a region's holder (its first region, in order)."""
        return next((self.best[r].node_id for r in sorted(self.best) if self.best[r].solution_id == solution_id), "?")

    def regions_of(self, solution_id: str) -> tuple[str, ...]:
        return tuple(r for r in sorted(self.best) if self.best[r].solution_id == solution_id)

    def holders(self) -> list[str]:
        """Distinct kernels holding at least one region, in region order."""
        out: list[str] = []
        for r in sorted(self.best):
            if self.best[r].solution_id not in out:
                out.append(self.best[r].solution_id)
        return out

    def summary(self) -> list[dict[str, Any]]:
        """JSON-ready rows for prompts and the offline model: region, its best score and kernel."""
        return [{"region": r, "best_score": round(b.score, 6), "solution_id": b.solution_id,
                 "workloads": sorted(w for w, rr in self.regions.items() if rr == r)}
                for r, b in sorted(self.best.items())]

    def context(self, source: Callable[[str], str | None]) -> dict[str, Any]:
        """What a model request carries about regions: nothing until two regions have a best kernel; then
        the per-region rows, the weakest region and (for the offline model) the kernel family holding it,
        read from its `# ksearch-plan:` header when it has one."""
        weakest = self.weakest()
        if weakest is None or len(self.best) < 2:
            return {}
        from ksearch.llm.offline import read_plan_header

        plan = read_plan_header(source(weakest.solution_id)) or {}
        return {"regions": self.summary(), "weakest_region": weakest.region,
                "weakest_region_family": plan.get("family")}

    def render(self) -> str:
        """One line per region, weakest first, for prompts."""
        if not self.best:
            return "-"
        rows = sorted(self.best.values(), key=lambda b: (b.score, b.region))
        return "\n".join(f"- {b.region}: best {b.score:.4g}x ({b.solution_id})"
                         + ("  <- weakest" if i == 0 else "") for i, b in enumerate(rows))


@dataclass(frozen=True)
class DispatchStep:
    """What composing a dispatch needs from the search, and nothing else."""

    task: Task
    board: RegionBoard
    source: Callable[[str], str | None]                         # a stored kernel's source
    evaluate: Callable[[Solution, str, int, int], EvalReport]   # (solution, node id, attempt, round), recorded
    write: Callable[[R.Record], R.Record]                       # the owner's record of what happened
    incumbent: Incumbent                                      # its held-out gate, and the only writer of best/


def finish_with_dispatch(step: DispatchStep, round_index: int, generator: int) -> None:
    """Compose the per-region incumbents into one solution and let it compete for the best (see module doc).
    `round_index`: the last round (it spends no round of its own); `generator`: the dispatch generator's
    version the run started with. Does nothing with fewer than two region holders or no best."""
    from ksearch.instantiate import solution_from_text
    from ksearch.instantiate.dispatch import DispatchError, Member, axis_sources, compose

    board, task, best = step.board, step.task, step.incumbent.best
    holders = board.holders()
    if best is None or len(holders) < 2:
        return
    members_ids = [best.solution_id] + [s for s in holders if s != best.solution_id]
    try:
        members = [Member(s, _stored(step, s)) for s in members_ids]
        table = {b.index: b.solution_id for b in board.best.values()}
        source = compose(members, table, best.solution_id, scheme_of(task), task.definition.input_names,
                         axis_sources(task.definition), task.name, generator)
    except (DispatchError, OSError) as e:
        step.write(R.Dispatch(composed=False, reason=str(e)[:500]))
        return
    sol = solution_from_text(task.name, source, name=f"{task.name}_dispatch", author="dispatch",
                             description=f"shape dispatch over {len(members)} kernels")
    sid = sol.solution_id
    if sid == best.solution_id:
        return
    report = step.evaluate(sol, "dispatch", 0, round_index)
    feedback_ok = report.passed and report.score is not None and \
        compare_reports(report, EvalReport.from_json(best.report), 0.0) != "worse"
    verdict = "worse on feedback" if not feedback_ok else "pending validate"
    accepted, validated = False, None
    if feedback_ok:
        confirmed = step.incumbent.gate.confirm(report, sid, round_index)
        accepted, verdict, validated = confirmed.accepted, confirmed.basis, confirmed.report
    member_nodes = {s: best.node_id if s == best.solution_id else board.node_of(s) for s in members_ids}
    step.write(R.Dispatch(composed=True, solution_id=sid, accepted=accepted, members=members_ids,
                          fallback=best.solution_id, member_nodes=member_nodes,
                          table={",".join(map(str, k)): v for k, v in sorted(table.items())},
                          regions=board.summary(), score=report.score, verdict=verdict))
    if accepted:
        gate = step.incumbent.gate
        record = R.BestRecord(solution_id=sid, score=report.score, node_id=best.node_id, round=round_index,
                              basis=f"shape dispatch over {len(members)} kernels; {verdict}",
                              validate_score=validated.score if validated else None, validate_set=gate.set_name)
        members_of = tuple(step.incumbent.member(s, member_nodes[s], board.regions_of(s), s == best.solution_id)
                           for s in members_ids)
        step.incumbent.replace(record, sol, report, members_of, validated)


def _stored(step: DispatchStep, solution_id: str) -> str:
    source = step.source(solution_id)
    if source is None:
        raise FileNotFoundError(f"the kernel {solution_id} is not in the run's solution store")
    return source
