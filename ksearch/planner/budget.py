"""The run's budgets: model spend (requests, dollars) and rounds (one round = one code request + one
evaluation). Stopping on a budget is a clean end: a resume with a larger budget continues the run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class BudgetSpent(Exception):
    """Raised where a model request would exceed the model budget; the message is the stop reason."""


@dataclass
class Spend:
    """Model usage so far (replayed requests included: they were paid for when first asked)."""

    requests: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, usage: dict[str, Any]) -> None:
        if usage.get("cached"):
            self.cached += 1
            return
        self.requests += 1
        self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.completion_tokens += int(usage.get("completion_tokens") or 0)
        self.cost_usd += float(usage.get("cost_usd") or 0.0)


def model_budget_reason(llm: Any, spend: Spend) -> str | None:
    """Why the model budget (llm.max_requests, llm.max_cost_usd) is spent, or None."""
    if llm.max_requests is not None and spend.requests >= llm.max_requests:
        return f"model budget spent: {spend.requests} requests (llm.max_requests={llm.max_requests})"
    if llm.max_cost_usd is not None and spend.cost_usd >= llm.max_cost_usd:
        return f"model budget spent: ${spend.cost_usd:.4f} (llm.max_cost_usd={llm.max_cost_usd})"
    return None


@dataclass
class Rounds:
    """Rounds used so far, plus (in a parallel run) rounds reserved by cycles in flight.

    A cycle reserves up to max_rounds_per_cycle rounds when it starts and gives back what it did not use
    when its results are applied, so the round budget is never overrun by cycles running side by side."""

    next: int = 1             # the next round label to hand out
    used: int = 0             # rounds whose attempts have been applied
    reserved: int = 0         # rounds held by cycles in flight

    def free(self, max_rounds: int) -> int:
        return max(0, max_rounds - self.used - self.reserved)
