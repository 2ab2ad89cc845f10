"""The model seam: requests, the offline catalog-driven model, a litellm-backed model, its response cache,
and replay of a recorded run. Only `base` is imported eagerly; litellm is imported when it is used."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ksearch.llm.base import USAGE_KEYS, Model, ModelError, ModelReply, ModelRequest, Usage

__all__ = ["Model", "ModelError", "ModelReply", "ModelRequest", "Usage", "USAGE_KEYS", "build_model"]

# LLMConfig fields (ksearch/config.py) that build_model uses, and those that are the search's business.
MODEL_FIELDS = ("model", "temperature", "max_tokens", "timeout_s", "max_retries", "api_base", "reasoning_effort",
                "replay", "cache_dir")
SEARCH_FIELDS = ("kind", "edit_retries", "max_cost_usd", "max_requests", "replay_measurements")
NO_CACHE = ("off", "none", "false", "no")


def build_model(kind: str, /, *, run_dir: str | Path | None = None, max_new_nodes: int = 3,
                retry_base_s: float | None = None, retry_max_s: float | None = None,
                **llm_fields: Any) -> Model:
    """The model for `llm.kind` given the llm.* fields (LLMConfig's names; the search's own are ignored).

    - llm.replay=RUN_DIR wins over the kind: every answer comes from that run's recording, no network.
    - `offline`: the built-in catalog model (never cached: it is free and deterministic).
    - `litellm`: any provider through litellm, wrapped in the response cache: llm.cache_dir if set
      (`off` disables it), else <run_dir>/llm_cache, else no cache.
    retry_base_s / retry_max_s pace retries (default 2 s doubling, capped at 60 s; the environment
    variables KSEARCH_LLM_RETRY_BASE_S / KSEARCH_LLM_RETRY_MAX_S override the defaults).
    """
    unknown = sorted(set(llm_fields) - set(MODEL_FIELDS) - set(SEARCH_FIELDS))
    if unknown:
        raise ModelError(f"build_model: unknown llm settings {unknown}; the known ones are the fields of "
                         f"LLMConfig: {', '.join(MODEL_FIELDS + SEARCH_FIELDS)}")
    f = {k: llm_fields.get(k) for k in MODEL_FIELDS}
    if f["replay"]:
        from ksearch.llm.replay import ReplayModel
        return ReplayModel(Path(str(f["replay"])))
    if kind == "offline":
        from ksearch.llm.offline import OfflineModel
        return OfflineModel(max_new_nodes=max_new_nodes)
    if kind == "litellm":
        from ksearch.llm.litellm_model import LiteLLMModel, LiteLLMSettings
        settings = LiteLLMSettings(
            model=f["model"] or "",
            temperature=None if f["temperature"] is None else float(f["temperature"]),
            max_tokens=None if f["max_tokens"] is None else int(f["max_tokens"]),
            timeout_s=600.0 if f["timeout_s"] is None else float(f["timeout_s"]),
            max_retries=4 if f["max_retries"] is None else int(f["max_retries"]),
            api_base=f["api_base"] or None, reasoning_effort=f["reasoning_effort"] or None,
            retry_base_s=_pace(retry_base_s, "KSEARCH_LLM_RETRY_BASE_S", 2.0),
            retry_max_s=_pace(retry_max_s, "KSEARCH_LLM_RETRY_MAX_S", 60.0))
        model = LiteLLMModel(settings)
        cache_root = _cache_root(f["cache_dir"], run_dir)
        if cache_root is None:
            return model
        from ksearch.llm.cache import CachedModel, ResponseCache
        return CachedModel(model, ResponseCache(cache_root), asked_before=_asked_before(run_dir))
    raise ModelError(f"unknown llm.kind {kind!r}; use llm=offline or llm=litellm (or llm.replay=RUN_DIR)")


def _pace(given: float | None, env: str, default: float) -> float:
    if given is not None:
        return float(given)
    raw = os.environ.get(env)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ModelError(f"{env}={raw!r} is not a number of seconds") from None


def _cache_root(cache_dir: Any, run_dir: str | Path | None) -> Path | None:
    if cache_dir is not None and str(cache_dir).strip().lower() in NO_CACHE:
        return None
    if cache_dir:
        return Path(str(cache_dir)).expanduser()
    return Path(run_dir) / "llm_cache" if run_dir is not None else None


def _asked_before(run_dir: str | Path | None) -> list[list[dict[str, Any]]]:
    """Chat messages of the model requests already in this run's journal (a resume replays them)."""
    if run_dir is None or not (Path(run_dir) / "journal.jsonl").is_file():
        return []
    from ksearch.store import read_records
    from ksearch.store.records import ModelCall

    records, _ = read_records(Path(run_dir) / "journal.jsonl")
    out = []
    for r in records:
        if isinstance(r, ModelCall) and r.request:
            try:
                out.append(ModelRequest.from_json(r.request).messages())
            except (KeyError, TypeError):
                continue
    return out
