"""A model behind litellm (any provider). Thin first version: one chat call per request, retries with
backoff on transient errors, token usage recorded. litellm is imported only when this model is built."""

from __future__ import annotations

import time
from typing import Any

from ksearch.llm.base import ModelError, ModelReply, ModelRequest


class LiteLLMModel:
    def __init__(self, model: str, *, temperature: float | None = None, max_tokens: int | None = None,
                 timeout_s: float = 600.0, max_retries: int = 4, api_base: str | None = None):
        if not model:
            raise ModelError("llm=litellm needs llm.model, e.g. llm.model=openai/gpt-5.2 or "
                             "llm.model=gemini/gemini-3-pro-preview")
        try:
            import litellm
        except ImportError as e:
            raise ModelError("llm=litellm needs the litellm package: pip install litellm") from e
        self._litellm = litellm
        self.name = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.api_base = api_base

    def complete(self, request: ModelRequest) -> ModelReply:
        kwargs: dict[str, Any] = {"model": self.name, "timeout": self.timeout_s,
                                  "messages": [{"role": "user", "content": request.full_prompt()}]}
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        if self.api_base:
            kwargs["api_base"] = self.api_base
        delay = 2.0
        last: Exception | None = None
        for attempt in range(self.max_retries + 1):
            try:
                resp = self._litellm.completion(**kwargs)
                text = resp.choices[0].message.content or ""
                usage = getattr(resp, "usage", None)
                usage_d = dict(usage) if usage is not None else {}
                try:
                    usage_d["cost_usd"] = float(self._litellm.completion_cost(completion_response=resp))
                except Exception:
                    pass
                return ModelReply(text=text, model=self.name, usage={k: v for k, v in usage_d.items()
                                                                      if isinstance(v, (int, float, str))})
            except (self._litellm.AuthenticationError, self._litellm.NotFoundError,
                    self._litellm.BadRequestError) as e:
                raise ModelError(f"{self.name}: {type(e).__name__}: {e}. Check llm.model and the provider's "
                                 f"API key environment variable.") from e
            except Exception as e:   # rate limits, timeouts, 5xx: back off and retry
                last = e
                if attempt < self.max_retries:
                    time.sleep(delay)
                    delay *= 2
        raise ModelError(f"{self.name}: no answer after {self.max_retries + 1} tries: {last}")
