"""The model seam: three requests (initial world model, tree edit, code) answered as text.

Every model, online or offline, receives the same `ModelRequest`: a rendered prompt (what an LLM reads)
and a JSON context (structured facts, which the offline model reads). Replies are plain text that the
planner parses and validates the same way whoever wrote them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Protocol


class ModelError(RuntimeError):
    """The model could not answer (network, quota, bad configuration); the message says what to do."""


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

    def key(self) -> str:
        """Identity of the request, used to check that a resumed run asks exactly what it asked before."""
        blob = json.dumps([self.kind, self.purpose, self.full_prompt(), self.context], sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "purpose": self.purpose, "prompt": self.prompt, "context": self.context,
                "retry_errors": self.retry_errors, "key": self.key()}


@dataclass
class ModelReply:
    text: str
    model: str
    usage: dict[str, Any] = field(default_factory=dict)


class Model(Protocol):
    name: str

    def complete(self, request: ModelRequest) -> ModelReply: ...
