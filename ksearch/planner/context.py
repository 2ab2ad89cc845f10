"""What every step of the search shares: the settings in effect, the run state, the way out (recorder),
the prompts and the progress display. The owner's model requests are asked here, against the budget."""

from __future__ import annotations

from dataclasses import dataclass

from ksearch.config import Config
from ksearch.llm.base import ModelRequest
from ksearch.planner.budget import BudgetSpent, model_budget_reason
from ksearch.planner.prompts import Prompts
from ksearch.planner.recorder import Progress, Recorder, Target
from ksearch.planner.settings import Segments
from ksearch.store.state import RunState


@dataclass(frozen=True)
class Context:
    settings: Segments
    state: RunState
    recorder: Recorder
    prompts: Prompts
    progress: Progress
    target: Target

    @property
    def cfg(self) -> Config:
        """The settings in effect (a replayed segment's, until the live edge)."""
        return self.settings.cfg

    def budget_reason(self) -> str | None:
        return model_budget_reason(self.cfg.llm, self.state.spend)

    def ask(self, req: ModelRequest, cycle: int | None = None) -> str:
        """The owner asks the model (within the budget); the answer's cost counts at once."""
        reason = self.budget_reason()
        if reason:
            raise BudgetSpent(reason)
        rec = self.recorder.ask(req, cycle)
        self.state.apply(rec)
        return rec.text

    def short_id(self, node_id: str) -> str:
        """The node's short id, as `ksearch show` prints it."""
        return self.state.short_ids.short(node_id)
