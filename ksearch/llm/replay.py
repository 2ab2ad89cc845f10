"""Answer every model request from a recorded run (llm.replay=RUN_DIR): an exact re-run, no network.

A run's journal holds each model request (with its `key`, see ModelRequest.key) and the reply it got.
The replay model answers a request by, in order:
1. its key: the same kind, purpose, full prompt and context as a recorded request;
2. its prompt: the same kind, purpose and full prompt as a request answered by an LLM (an LLM never saw
   the context, so its answer still applies; the offline model's answers depend on the context and are
   matched by key only);
3. the recorded run's response cache (<RUN_DIR>/llm_cache), by the exact chat messages.
A request asked several times is answered with the recorded answers in their recorded order (the last
one repeats). A request found nowhere is a ModelError saying the run diverged from the recording;
nothing is ever sent to a provider. Replayed answers cost nothing now (`cached` usage).
"""

from __future__ import annotations

from collections import defaultdict, deque
from pathlib import Path
from typing import Any

from ksearch.llm.base import ModelError, ModelReply, ModelRequest, as_cached_usage
from ksearch.llm.cache import ResponseCache, prompt_digest
from ksearch.llm.redact import redact_obj


class _Answers:
    """Recorded answers to one request, handed out in order; the last one repeats."""

    def __init__(self) -> None:
        self.values: deque[dict[str, Any]] = deque()

    def take(self) -> dict[str, Any]:
        return self.values.popleft() if len(self.values) > 1 else self.values[0]


class ReplayModel:
    def __init__(self, recording: Path | str):
        from ksearch.store import read_records  # lazily: the store imports the solution types
        from ksearch.store.records import ModelCall, RunStart

        self.recording = Path(recording)
        journal = self.recording / "journal.jsonl"
        if not self.recording.is_dir():
            raise ModelError(f"llm.replay={recording}: no such directory; point it at a run directory "
                             f"(runs/<task>/<timestamp>)")
        try:
            records, _ = read_records(journal)
        except Exception as e:      # noqa: BLE001 - a damaged journal: say which file, do not guess
            raise ModelError(f"llm.replay={recording}: cannot read {journal}: {e}") from None
        self._by_key: dict[str, _Answers] = defaultdict(_Answers)
        self._by_prompt: dict[tuple[str, str, str], _Answers] = defaultdict(_Answers)
        self._by_messages: dict[str, list[dict[str, Any]]] = defaultdict(list)
        name = None
        self.recorded_requests = 0
        for r in records:
            if isinstance(r, RunStart) and r.model and name is None:
                name = r.model
            if not isinstance(r, ModelCall) or not r.value:
                continue
            value = r.value
            self.recorded_requests += 1
            self._by_key[r.key].values.append(value)
            req = r.request
            if req and value.get("model") != "offline":
                try:
                    mreq = ModelRequest.from_json(req)
                except (KeyError, TypeError):
                    continue
                self._by_prompt[self._prompt_id(mreq)].values.append(value)
            name = name or value.get("model")
        cache = ResponseCache(self.recording / "llm_cache")
        cached = sorted(cache.entries(), key=lambda e: e.get("occurrence", 0))
        for entry in cached:
            self._by_messages[prompt_digest(entry["messages"])].append(entry["reply"])
        if not self.recorded_requests and not cached:
            raise ModelError(f"llm.replay={recording} holds no recorded model replies (no 'model' records in "
                             f"{journal} and no llm_cache/); replay a run that asked a model")
        self.name = name or "replay"
        self.answered = 0
        self._cache_taken: dict[str, int] = defaultdict(int)

    @staticmethod
    def _prompt_id(req: ModelRequest) -> tuple[str, str, str]:
        return req.kind, req.purpose, prompt_digest(req.messages())

    def complete(self, request: ModelRequest) -> ModelReply:
        value, how = self._find(request)
        if value is None:
            raise ModelError(
                f"replay of {self.recording}: no recorded answer to this {request.kind}/{request.purpose} request "
                f"(key {request.key()}, after {self.answered} replayed answers): the run diverged from the "
                f"recording, so it asked something the recorded run never asked (its settings, task or code "
                f"differ). Replay with the recorded run's settings, or drop llm.replay to ask the model live.")
        self.answered += 1
        return ModelReply(text=value["text"], model=value.get("model") or self.name,
                          usage=redact_obj(as_cached_usage(value.get("usage") or {}, replayed_from=str(self.recording),
                                                           replay_match=how)))

    def _find(self, request: ModelRequest) -> tuple[dict[str, Any] | None, str]:
        answers = self._by_key.get(request.key())
        if answers is not None:
            return answers.take(), "key"
        answers = self._by_prompt.get(self._prompt_id(request))
        if answers is not None:
            return answers.take(), "prompt"
        digest = prompt_digest(redact_obj(request.messages()))     # cache entries are stored redacted
        replies = self._by_messages.get(digest)
        if replies:
            i = min(self._cache_taken[digest], len(replies) - 1)
            self._cache_taken[digest] += 1
            return replies[i], "cache"
        return None, ""
