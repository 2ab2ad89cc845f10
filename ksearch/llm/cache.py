"""A content-addressed cache of model responses, stored as files, so nothing is paid for twice.

The key is a hash of what changes the answer: the model and its sampling settings (`identity()` of the
wrapped model), the exact chat messages sent, and how many times this run has already asked that same
prompt (the occurrence). Counting occurrences keeps sampling honest: a run that asks the same prompt
twice gets two independent answers, and a re-run of it gets the same two answers in the same order.

Entries live under `<run_dir>/llm_cache/` by default, or in a shared directory (llm.cache_dir) that
several runs read and fill. Each entry is one JSON file written to a temporary name and renamed into
place, so a crash or a concurrent writer never leaves half a file; a damaged or mismatching file is a
miss, never an answer.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ksearch.llm.base import ModelReply, ModelRequest, as_cached_usage
from ksearch.llm.redact import redact_obj
from ksearch.store.atomic import atomic_write

CACHE_VERSION = 1


def prompt_digest(messages: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(messages, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def cache_key(identity: dict[str, Any], messages: list[dict[str, Any]], occurrence: int) -> str:
    blob = json.dumps({"v": CACHE_VERSION, "identity": identity, "messages": messages, "occurrence": occurrence},
                      sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


class ResponseCache:
    """Files `<root>/<key[:2]>/<key>.json`, each holding the request it answers and the reply."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str, messages: list[dict[str, Any]]) -> dict[str, Any] | None:
        p = self.path(key)
        try:
            entry = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None            # absent or damaged: ask again (the write will replace it)
        # entries are stored redacted (see CachedModel), so compare the redacted form
        if not isinstance(entry, dict) or entry.get("messages") != redact_obj(messages) or "reply" not in entry:
            return None
        return entry

    def put(self, key: str, entry: dict[str, Any]) -> None:
        atomic_write(self.path(key), json.dumps(entry, indent=1, ensure_ascii=False))

    def entries(self) -> Iterable[dict[str, Any]]:
        """Every readable entry (for replay's fallback index)."""
        if not self.root.is_dir():
            return
        for p in sorted(self.root.glob("*/*.json")):
            try:
                entry = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(entry, dict) and "reply" in entry and "messages" in entry:
                yield entry


class CachedModel:
    """Wraps a model that has `identity()`; answers from the cache when it can, else asks and stores."""

    def __init__(self, inner: Any, cache: ResponseCache, asked_before: Iterable[list[dict[str, Any]]] = ()):
        self.inner = inner
        self.cache = cache
        self.name = inner.name
        self.hits = 0
        self.misses = 0
        # Prompts this run asked before a resume: their answers come from the journal, not from here,
        # but they still count as earlier occurrences.
        self._asked: Counter[str] = Counter(prompt_digest(m) for m in asked_before)

    def complete(self, request: ModelRequest) -> ModelReply:
        messages = request.messages()
        digest = prompt_digest(messages)
        occurrence = self._asked[digest]
        self._asked[digest] += 1
        identity = self.inner.identity()
        key = cache_key(identity, messages, occurrence)
        entry = self.cache.get(key, messages)
        if entry is not None:
            self.hits += 1
            r = entry["reply"]
            return ModelReply(text=r["text"], model=r.get("model", self.name),
                              usage=redact_obj(as_cached_usage(r.get("usage") or {}, cache_key=key[:16])))
        self.misses += 1
        reply = self.inner.complete(request)
        self.cache.put(key, redact_obj({
            "version": CACHE_VERSION, "key": key, "identity": identity, "occurrence": occurrence,
            "request": {"kind": request.kind, "purpose": request.purpose, "journal_key": request.key()},
            "messages": messages, "created": time.time(),
            "reply": {"text": reply.text, "model": reply.model, "usage": reply.usage}}))
        return reply
