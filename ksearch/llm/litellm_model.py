"""A model behind litellm: any provider it supports, or any OpenAI-compatible server (llm.api_base).

One chat call per request. Transient failures (rate limits, timeouts, 5xx, dropped connections, garbled
bodies) are retried with exponential backoff and jitter, honouring a server's Retry-After; errors a
retry cannot fix (bad request, auth, unknown model, unsupported parameter) fail at once with a message
that says what to change. Every reply carries the usage of all its tries (tokens, dollars when litellm
knows the price, latency, number of tries). Nothing that leaves this module contains an API key: keys
come from the environment and are redacted from messages and usage.

litellm is imported only when a LiteLLMModel is built (it is slow to import and not needed offline),
with its price table read from the installed package instead of the network (set
LITELLM_LOCAL_MODEL_COST_MAP=False to fetch current prices).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ksearch.llm.base import ModelError, ModelReply, ModelRequest, Usage
from ksearch.llm.redact import redact, redact_obj

_RETRY_STATUS = {408, 409, 425, 429}          # plus every 5xx
_NO_KEY_PLACEHOLDER = "ksearch-no-key"       # sent to a keyless OpenAI-compatible server (e.g. local vLLM)


@dataclass(frozen=True)
class LiteLLMSettings:
    """The llm.* fields this model uses, plus retry pacing (tests shorten it)."""

    model: str
    temperature: float | None = None
    max_tokens: int | None = None
    timeout_s: float = 600.0
    max_retries: int = 4              # retries after the first try
    api_base: str | None = None
    reasoning_effort: str | None = None
    retry_base_s: float = 2.0         # first backoff; doubles per retry, with jitter
    retry_max_s: float = 60.0         # cap on one backoff (and on a server's Retry-After)

    def identity(self) -> dict[str, Any]:
        """What changes the answer: the key of the response cache (timeouts and retries do not)."""
        d: dict[str, Any] = {"model": self.model, "temperature": self.temperature, "max_tokens": self.max_tokens,
                             "reasoning_effort": self.reasoning_effort}
        if self.api_base:
            d["api_base"] = self.api_base.rstrip("/")
        return d


def import_litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")   # no network fetch at import
    try:
        import litellm
    except ImportError as e:
        raise ModelError("llm=litellm needs the litellm package: pip install 'litellm>=1.80,!=1.107.0'") from e
    litellm.suppress_debug_info = True     # no "Give Feedback / Get Help" banners on stdout
    return litellm


class _Tally:
    """Usage summed over the tries of one request."""

    def __init__(self) -> None:
        self.tries = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cost_usd = 0.0
        self.cost_known = True
        self.extra: dict[str, Any] = {}

    def usage(self, latency_s: float, wall_s: float) -> dict[str, Any]:
        return redact_obj(Usage(self.prompt_tokens, self.completion_tokens, round(self.cost_usd, 10),
                                self.cost_known, self.tries, latency_s, False,
                                {**self.extra, "wall_s": round(wall_s, 4)}).to_dict())


class LiteLLMModel:
    def __init__(self, settings: LiteLLMSettings, *, sleep: Callable[[float], None] = time.sleep):
        if not settings.model:
            raise ModelError("llm=litellm needs llm.model, e.g. llm.model=openai/gpt-5.2, "
                             "llm.model=gemini/gemini-3-pro-preview or llm.model=anthropic/claude-sonnet-4-5 "
                             "(with llm.api_base=http://HOST:PORT/v1 for an OpenAI-compatible server)")
        if settings.max_retries < 0 or settings.timeout_s <= 0:
            raise ModelError(f"llm.max_retries must be >= 0 and llm.timeout_s > 0 (got {settings.max_retries}, "
                             f"{settings.timeout_s})")
        self._litellm = import_litellm()
        self.settings = settings
        self.name = settings.model
        self._sleep = sleep
        self._rng = random.Random()

    def identity(self) -> dict[str, Any]:
        return self.settings.identity()

    # ---- the call -------------------------------------------------------------------------------
    def _call_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        s = self.settings
        kw: dict[str, Any] = {"model": s.model, "messages": request.messages(), "timeout": s.timeout_s,
                              # retries are ours alone: litellm's and the OpenAI SDK's would hide tries
                              "num_retries": 0, "max_retries": 0}
        if s.temperature is not None:
            kw["temperature"] = s.temperature
        if s.max_tokens is not None:
            kw["max_tokens"] = s.max_tokens
        if s.reasoning_effort:
            kw["reasoning_effort"] = s.reasoning_effort
        if s.api_base:
            kw["api_base"] = s.api_base
            if s.model.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
                kw["api_key"] = _NO_KEY_PLACEHOLDER
        return kw

    def complete(self, request: ModelRequest) -> ModelReply:
        kwargs = self._call_kwargs(request)
        tally = _Tally()
        started = time.monotonic()
        last = "no try made"
        for attempt in range(self.settings.max_retries + 1):
            t0 = time.monotonic()
            tally.tries += 1
            error: Exception | None = None
            try:
                resp = self._litellm.completion(**kwargs)
            except Exception as e:      # noqa: BLE001 - classified below; nothing is swallowed
                error = e
            latency = time.monotonic() - t0
            if error is not None:
                if not self._retryable(error):
                    raise ModelError(self._fatal_message(error, request),
                                     tally.usage(latency, time.monotonic() - started)) from None
                last = self._describe(error)
            else:
                self._account(resp, tally)
                text, finish = _content(resp)
                if text.strip():
                    return ModelReply(text=text, model=self.name,
                                      usage=tally.usage(latency, time.monotonic() - started))
                if finish == "length":
                    raise ModelError(redact(
                        f"{self.name}: the reply was cut off before any text (finish_reason=length): the model "
                        f"spent llm.max_tokens={self.settings.max_tokens} on reasoning. Raise llm.max_tokens or "
                        f"lower llm.reasoning_effort."), tally.usage(latency, time.monotonic() - started))
                last = f"empty reply (finish_reason={finish})"
            if attempt < self.settings.max_retries:
                self._sleep(self._backoff(attempt, error))
        raise ModelError(redact(
            f"{self.name}: no answer after {tally.tries} tries ({request.kind}/{request.purpose} request); last "
            f"error: {last}. The provider may be overloaded or unreachable: try again later, raise "
            f"llm.max_retries / llm.timeout_s, or check llm.api_base."),
            tally.usage(0.0, time.monotonic() - started))

    # ---- errors ---------------------------------------------------------------------------------
    def _retryable(self, e: Exception) -> bool:
        lt = self._litellm
        transient = tuple(c for c in (getattr(lt, n, None) for n in (
            "Timeout", "APIConnectionError", "RateLimitError", "InternalServerError", "ServiceUnavailableError",
            "BadGatewayError")) if isinstance(c, type))
        status = getattr(e, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500 and status not in _RETRY_STATUS:
            return False           # bad request, auth, not found, unsupported parameter: a retry repeats it
        if transient and isinstance(e, transient):
            return True
        if isinstance(status, int):
            return status in _RETRY_STATUS or status >= 500
        return isinstance(e, (ConnectionError, TimeoutError))

    @staticmethod
    def _describe(e: Exception) -> str:
        status = getattr(e, "status_code", None)
        msg = " ".join(str(e).split())
        if len(msg) > 600:
            msg = msg[:600] + " ..."
        return redact(f"{type(e).__name__}{f' (HTTP {status})' if status else ''}: {msg}")

    def _fatal_message(self, e: Exception, request: ModelRequest) -> str:
        lt = self._litellm
        what = self._describe(e)
        status = getattr(e, "status_code", None)
        if isinstance(e, getattr(lt, "AuthenticationError", ())) or status in (401, 403):
            hint = f"Check the API key for {self.name}{self._missing_keys()} (keys are read from the environment)."
        elif isinstance(e, getattr(lt, "NotFoundError", ())) or status == 404:
            hint = "Check llm.model (provider/model-name) and llm.api_base."
        elif isinstance(e, getattr(lt, "UnsupportedParamsError", ())) or "unsupported" in what.lower():
            hint = ("The model does not take one of the parameters set: unset llm.temperature, "
                    "llm.reasoning_effort or llm.max_tokens for it.")
        elif isinstance(e, getattr(lt, "ContextWindowExceededError", ())):
            hint = "The prompt is longer than the model's context window: pick a model with a larger window."
        elif isinstance(status, int):
            hint = "The provider refused the request; a retry would not change that. Check llm.* settings."
        else:
            hint = "This is not a transient provider error, so it was not retried."
        return redact(f"{self.name}: {request.kind}/{request.purpose} request failed: {what}. {hint}")

    def _missing_keys(self) -> str:
        try:
            env = self._litellm.validate_environment(model=self.name)
        except Exception:           # noqa: BLE001 - a hint only; the error being reported matters more
            return ""
        missing = env.get("missing_keys") or [] if isinstance(env, dict) else []
        return f" (missing: {', '.join(missing)})" if missing else ""

    def _backoff(self, attempt: int, error: Exception | None) -> float:
        s = self.settings
        delay = min(s.retry_max_s, s.retry_base_s * (2 ** attempt)) * (0.75 + 0.25 * self._rng.random())
        after = _retry_after(error)
        if after is not None:
            delay = max(delay, min(after, s.retry_max_s))
        return delay

    # ---- accounting -----------------------------------------------------------------------------
    def _account(self, resp: Any, tally: _Tally) -> None:
        usage = _get(resp, "usage")
        if usage is None:
            tally.cost_known = False
            return
        tally.prompt_tokens += int(_get(usage, "prompt_tokens") or 0)
        tally.completion_tokens += int(_get(usage, "completion_tokens") or 0)
        reasoning = _get(_get(usage, "completion_tokens_details"), "reasoning_tokens")
        if reasoning:
            tally.extra["reasoning_tokens"] = tally.extra.get("reasoning_tokens", 0) + int(reasoning)
        cached = _get(_get(usage, "prompt_tokens_details"), "cached_tokens")
        if cached:
            tally.extra["cached_prompt_tokens"] = tally.extra.get("cached_prompt_tokens", 0) + int(cached)
        served = _get(resp, "model")
        if isinstance(served, str) and served:
            tally.extra["served_model"] = served
        cost = self._cost(resp)
        if cost is None:
            tally.cost_known = False
        else:
            tally.cost_usd += cost

    def _cost(self, resp: Any) -> float | None:
        """Dollars for one response, or None when litellm has no price for the model."""
        for kw in ({}, {"model": self.name}):
            try:
                return float(self._litellm.completion_cost(completion_response=resp, **kw))
            except Exception:       # noqa: BLE001 - unknown model or provider: the price is unknown, not zero
                continue
        return None


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _content(resp: Any) -> tuple[str, str | None]:
    choices = _get(resp, "choices") or []
    if not choices:
        return "", None
    first = choices[0]
    msg = _get(first, "message")
    text = _get(msg, "content") or ""
    if isinstance(text, list):      # content parts
        text = "".join(str(_get(p, "text") or "") for p in text)
    return str(text), _get(first, "finish_reason")


def _retry_after(error: Exception | None) -> float | None:
    response = getattr(error, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None
