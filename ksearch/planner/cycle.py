"""One action cycle's own state: what it builds on, its attempts so far, its best, when it stops.

Attempt 1 applies the plan step to the base kernel; later attempts debug (nothing passed yet) or improve
(something passed). The cycle ends after `stagnation_window` non-improving attempts or
`max_rounds_per_cycle` attempts (or fewer rounds, when the round budget reserves fewer). A cycle's state
depends only on its own attempts, so cycles can run side by side and their results be applied later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ksearch.eval.clocks.noise import compare_reports
from ksearch.eval.report import EvalReport
from ksearch.store import records as R
from ksearch.world_model import Node


@dataclass(frozen=True)
class Attempt:
    """One round: the model's reply, and the measurement of its code (or why it held none)."""

    number: int                            # 1, 2, ... within its cycle
    round: int
    mode: str
    report: EvalReport                     # a COMPILE_ERROR report whose log says why when there was no code
    records: tuple[R.Record, ...]          # its model reply, then its evaluation: applied with the attempt
    code: str | None = None                # None: the reply held no usable code

    @property
    def solution_id(self) -> str | None:
        return next((r.solution_id for r in self.records if isinstance(r, R.Evaluation)), None)


@dataclass(frozen=True)
class Base:
    """The kernel a step builds on (through split steps): none for a family, which starts from scratch."""

    solution_id: str | None = None
    code: str | None = None
    score: float | None = None


@dataclass(frozen=True)
class Outlook:
    """The run as the cycle's prompts see it, taken when the cycle starts."""

    best_score: float | None = None        # the global best (for the close request)
    regions: str = "-"                     # per-region evidence, one line per region
    region_context: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CycleStart:
    cycle: int                             # the cycle id (1, 2, ...), recorded on every record of its work
    node: Node
    first_round: int                       # the round label of attempt 1
    max_attempts: int                      # attempts this cycle may make (cap and round budget)
    base: Base = field(default_factory=Base)
    outlook: Outlook = field(default_factory=Outlook)


@dataclass(frozen=True)
class Rules:
    stagnation_window: int                 # non-improving attempts that end a cycle
    improvement_margin: float              # relative gain that counts as an improvement


@dataclass
class CycleState:
    """A started cycle and the attempts folded into it so far."""

    start: CycleStart
    rules: Rules
    attempts: list[Attempt] = field(default_factory=list, init=False)
    best: tuple[str, EvalReport] | None = field(default=None, init=False)    # (code, report)
    best_sid: str | None = field(default=None, init=False)
    last: EvalReport | None = field(default=None, init=False)
    streak: int = field(default=0, init=False)              # non-improving attempts in a row

    @property
    def cycle(self) -> int:
        return self.start.cycle

    @property
    def node(self) -> Node:
        return self.start.node

    @property
    def first_round(self) -> int:
        return self.start.first_round

    @property
    def max_attempts(self) -> int:
        return self.start.max_attempts

    @property
    def base(self) -> Base:
        return self.start.base

    @property
    def k(self) -> int:
        """Attempts made."""
        return len(self.attempts)

    @property
    def codes(self) -> list[str]:
        return [a.code for a in self.attempts if a.code is not None]

    @property
    def mode(self) -> str:
        return "action" if self.k == 0 else ("improve" if self.best else "debug")

    @property
    def next_round(self) -> int:
        return self.first_round + self.k

    @property
    def passed(self) -> bool:
        return self.best is not None and self.best_sid is not None

    def stagnated(self) -> bool:
        return self.streak >= self.rules.stagnation_window

    def record(self, a: Attempt) -> None:
        """Fold one attempt in: the cycle's best moves only on an improvement beyond the margin."""
        self.attempts.append(a)
        report = a.report
        self.last = report
        sid = a.solution_id
        improved = report.passed and report.score is not None and sid is not None and (
            self.best is None or compare_reports(report, self.best[1], self.rules.improvement_margin) == "better")
        if improved:
            assert a.code is not None
            self.best, self.best_sid, self.streak = (a.code, report), sid, 0
        else:
            self.streak += 1
