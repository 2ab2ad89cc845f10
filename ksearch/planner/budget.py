"""The model budget (llm.max_requests, llm.max_cost_usd). Stopping on a budget is a clean end: a resume
with a larger budget continues the run. What has been spent is the run state's (store/state.py: `Spend`),
and so is the round budget (`Rounds`)."""

from __future__ import annotations

from typing import Any

from ksearch.store.state import Spend


class BudgetSpent(Exception):
    """Raised where a model request would exceed the model budget; the message is the stop reason."""


def model_budget_reason(llm: Any, spend: Spend) -> str | None:
    """Why the model budget (llm.max_requests, llm.max_cost_usd) is spent, or None."""
    if llm.max_requests is not None and spend.requests >= llm.max_requests:
        return f"model budget spent: {spend.requests} requests (llm.max_requests={llm.max_requests})"
    if llm.max_cost_usd is not None and spend.cost_usd >= llm.max_cost_usd:
        return f"model budget spent: ${spend.cost_usd:.4f} (llm.max_cost_usd={llm.max_cost_usd})"
    return None
