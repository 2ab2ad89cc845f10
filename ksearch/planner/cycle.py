"""One action cycle's own state: what it builds on, its attempts so far, its best, when it stops.

Attempt 1 applies the plan step to the base kernel; later attempts debug (nothing passed yet) or improve
(something passed). The cycle ends after `stagnation_window` non-improving attempts or
`max_rounds_per_cycle` attempts (or fewer rounds, when the round budget reserves fewer). A cycle's state
depends only on its own attempts, so cycles can run side by side and their results be applied later.
"""

from __future__ import annotations

from typing import Any
from dataclasses import dataclass, field

from ksearch.eval.clocks.noise import compare_reports
from ksearch.eval.report import EvalReport
from ksearch.world_model import Node


@dataclass
class Attempt:
    """One round: the model's code (if it gave any) and its measurement."""

    attempt: int
    round: int
    mode: str
    report: EvalReport
    solution_id: str | None = None         # None: the reply held no usable code (bad_error says why)
    code: str | None = None
    bad_error: str | None = None
    usage: dict = field(default_factory=dict)


@dataclass
class CycleState:
    """Replaces the positional parameters the loop used to pass around: node, base, attempts, best."""

    cycle: int                             # the cycle id (1, 2, ...), recorded on every record of its work
    node: Node
    first_round: int                       # the round label of attempt 1
    max_attempts: int                      # attempts this cycle may make (cap and round budget)
    stagnation_window: int
    improvement_margin: float
    base_sid: str | None = None
    base_code: str | None = None
    base_score: float | None = None
    best_score: float | None = None        # the global best when the cycle started (for the close request)
    regions: str = "-"                     # per-region evidence when the cycle started (its prompts' snapshot)
    region_context: dict[str, Any] = field(default_factory=dict)
    codes: list[str] = field(default_factory=list)
    best: tuple[str, EvalReport] | None = None
    best_sid: str | None = None
    last: EvalReport | None = None
    streak: int = 0
    k: int = 0                             # attempts made
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def mode(self) -> str:
        return "action" if self.k == 0 else ("improve" if self.best else "debug")

    @property
    def next_round(self) -> int:
        return self.first_round + self.k

    @property
    def rounds(self) -> int:
        return self.k

    @property
    def passed(self) -> bool:
        return self.best is not None and self.best_sid is not None

    def stagnated(self) -> bool:
        return self.streak >= self.stagnation_window

    def record(self, a: Attempt) -> None:
        """Fold one attempt in: the cycle's best moves only on an improvement beyond the margin."""
        self.attempts.append(a)
        if a.code is not None:
            self.codes.append(a.code)
        report = a.report
        self.last = report
        self.k += 1
        improved = report.passed and report.score is not None and a.solution_id is not None and (
            self.best is None or compare_reports(report, self.best[1], self.improvement_margin) == "better")
        if improved:
            assert a.solution_id is not None and a.code is not None
            self.best, self.best_sid, self.streak = (a.code, report), a.solution_id, 0
        else:
            self.streak += 1
