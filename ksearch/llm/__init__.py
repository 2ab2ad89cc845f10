"""The model seam: requests, the offline catalog-driven model, and a litellm-backed model."""

from ksearch.llm.base import Model, ModelError, ModelReply, ModelRequest

__all__ = ["Model", "ModelError", "ModelReply", "ModelRequest", "build_model"]


def build_model(kind: str, **kw):
    """`offline` (built in) or `litellm` (imported lazily)."""
    if kind == "offline":
        from ksearch.llm.offline import OfflineModel
        return OfflineModel(max_new_nodes=kw.get("max_new_nodes", 3))
    if kind == "litellm":
        from ksearch.llm.litellm_model import LiteLLMModel
        return LiteLLMModel(kw["model"], temperature=kw.get("temperature"), max_tokens=kw.get("max_tokens"),
                            timeout_s=kw.get("timeout_s", 600.0), max_retries=kw.get("max_retries", 4),
                            api_base=kw.get("api_base"))
    raise ModelError(f"unknown llm.kind {kind!r}; use offline or litellm")
