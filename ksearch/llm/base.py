"""The model seam: three requests (initial world model, tree edit, code) answered as text.

Every model, online or offline, receives the same `ModelRequest`: a rendered prompt (what an LLM reads)
and a JSON context (structured facts, which the offline model reads). Replies are plain text that the
planner parses and validates the same way whoever wrote them.

Every reply also carries a usage dict with the same numeric keys whoever answered (see `Usage`), so the
search can account budgets (llm.max_cost_usd, llm.max_requests) without knowing which model it talks to.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Protocol


class ModelError(RuntimeError):
    """The model could not answer (network, quota, bad configuration); the message says what to do.

    `usage` holds what the failed tries cost (tokens and dollars of tries that returned usage before the
    call gave up), so a budget can count money spent on answers that never arrived.
    """

    def __init__(self, message: str, usage: dict[str, Any] | None = None):
        super().__init__(message)
        self.usage: dict[str, Any] = usage or {}


#: Context entries that are facts of the whole run, not of one request: RunStart records and checks them on
#: resume, and the prompt already names the hardware. Left out of `ModelRequest.key`, so journals recorded
#: before a request carried them still resume and replay (the offline model reads `device`).
RUN_FACTS = frozenset({"device"})


@dataclass
class ModelRequest:
    kind: str                      # "init" | "edit" | "code"
    purpose: str                   # edit: propose|after_success|after_failure; code: action|debug|improve
    prompt: str
    context: dict[str, Any] = field(default_factory=dict)
    retry_errors: list[str] = field(default_factory=list)

    def full_prompt(self) -> str:
        if not self.retry_errors:
            return self.prompt
        reasons = "\n".join(f"- {e}" for e in self.retry_errors)
        return (f"{self.prompt}\n\nYour previous answer was rejected and changed nothing, for these reasons:\n"
                f"{reasons}\nAnswer again, fixing every one of them.")

    def messages(self) -> list[dict[str, str]]:
        """The chat messages an LLM receives for this request (also what the response cache is keyed on)."""
        return [{"role": "user", "content": self.full_prompt()}]

    def key(self) -> str:
        """Identity of the request, used to check that a resumed run asks exactly what it asked before."""
        context = {k: v for k, v in self.context.items() if k not in RUN_FACTS}
        blob = json.dumps([self.kind, self.purpose, self.full_prompt(), context], sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "purpose": self.purpose, "prompt": self.prompt, "context": self.context,
                "retry_errors": self.retry_errors, "key": self.key()}

    @staticmethod
    def from_json(d: dict[str, Any]) -> ModelRequest:
        return ModelRequest(d["kind"], d.get("purpose", ""), d.get("prompt", ""), dict(d.get("context") or {}),
                            list(d.get("retry_errors") or []))


@dataclass
class Usage:
    """What one answer cost. `to_dict()` is what goes into ModelReply.usage and the journal.

    Tokens and cost sum over every try of the request, failed tries that returned usage included.
    `cost_usd` is 0.0 when the price is unknown (`cost_known` False) and for cache hits and replays
    (`cached` True), whose first cost is kept as `original_cost_usd`.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True
    tries: int = 1
    latency_s: float = 0.0         # the answering try's round trip (0 for cache hits)
    cached: bool = False
    extra: dict[str, Any] = field(default_factory=dict)   # provider details: reasoning tokens, wall time ...

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = dict(self.extra)
        d.update(prompt_tokens=int(self.prompt_tokens), completion_tokens=int(self.completion_tokens),
                 cost_usd=float(self.cost_usd), cost_known=bool(self.cost_known), tries=int(self.tries),
                 latency_s=round(float(self.latency_s), 4), cached=bool(self.cached))
        return d


USAGE_KEYS = ("prompt_tokens", "completion_tokens", "cost_usd", "cost_known", "tries", "latency_s", "cached")


def as_cached_usage(recorded: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The usage of an answer taken from a cache or a recording: free now, its first cost remembered."""
    original = recorded.get("original_cost_usd", recorded.get("cost_usd", 0.0)) or 0.0
    kept = {k: v for k, v in recorded.items() if k not in USAGE_KEYS}
    return Usage(prompt_tokens=int(recorded.get("prompt_tokens") or 0),
                 completion_tokens=int(recorded.get("completion_tokens") or 0), cost_usd=0.0, cost_known=True,
                 tries=0, latency_s=0.0, cached=True,
                 extra={**kept, "original_cost_usd": float(original), **extra}).to_dict()


@dataclass
class ModelReply:
    text: str
    model: str
    usage: dict[str, Any] = field(default_factory=lambda: Usage().to_dict())


class Model(Protocol):
    name: str

    def complete(self, request: ModelRequest) -> ModelReply: ...
