"""A local OpenAI-compatible chat server that answers from a script, for tests without a network.

The real litellm path (litellm -> OpenAI SDK -> HTTP) talks to it exactly as it would to a provider, so
the tests exercise retries, timeouts, usage and parameter passing end to end. Each request consumes the
next `Step` of the transcript; a step is a reply, an HTTP error, a delay, or a raw (malformed) body. A
step without text answers from `by_prompt` (the last user message -> reply text), which is how a
recorded search is served back. Every request received is kept in `requests`.

    with FakeLLMServer([error(429), reply("hi")]) as srv:
        build_model("litellm", model="openai/x", api_base=srv.api_base)

`delay_s` makes every answer take that long (a model's latency), and each `Received` keeps when it
arrived and when it was answered, so a test can see requests being served side by side.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Step:
    """One scripted answer. `text=None` with status 200 means: answer from the server's by_prompt table."""

    text: str | None = None
    status: int = 200
    delay_s: float = 0.0
    raw_body: bytes | None = None                 # sent as is (malformed JSON, truncated bodies)
    usage: dict[str, int] | None = None           # default: token counts from the text lengths
    model: str | None = None                      # the model name the response claims
    error_message: str = "scripted error"       # "{auth}" is replaced by the Authorization header received
    headers: dict[str, str] = field(default_factory=dict)
    finish_reason: str = "stop"


def reply(text: str, **kw: Any) -> Step:
    return Step(text=text, **kw)


def error(status: int, message: str = "scripted error", **kw: Any) -> Step:
    return Step(status=status, error_message=message, **kw)


def delay(seconds: float, then: Step | None = None) -> Step:
    """Sleep longer than the client's timeout, then answer `then` (default: a reply nobody waits for)."""
    then = then or Step(text="too late")
    return Step(text=then.text, status=then.status, delay_s=seconds, raw_body=then.raw_body, usage=then.usage,
                error_message=then.error_message)


def malformed(body: bytes = b'{"id": "x", "choices": [ {"mess') -> Step:
    return Step(raw_body=body)


def from_prompt() -> Step:
    return Step()


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    arrived: float = 0.0                    # time.monotonic() when the request came in
    answered: float | None = None           # when the answer was sent

    @property
    def prompt(self) -> str:
        msgs = (self.body or {}).get("messages") or []
        users = [m for m in msgs if m.get("role") == "user"]
        content = users[-1]["content"] if users else ""
        if isinstance(content, list):    # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return content


class FakeLLMServer:
    """127.0.0.1 on a free port, in a daemon thread. Use as a context manager, or start()/stop()."""

    def __init__(self, steps: list[Step] | None = None, *, by_prompt: dict[str, str | list[str]] | None = None,
                 model: str = "fake-model", delay_s: float = 0.0):
        self.delay_s = delay_s
        self.steps = list(steps or [])
        # prompt -> reply, or several replies handed out in order (the last one repeats)
        self.by_prompt = {k: list(v) if isinstance(v, list) else [v] for k, v in (by_prompt or {}).items()}
        self.model = model
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ------------------------------------------------------------------------------
    def start(self) -> FakeLLMServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:    # keep test output clean
                pass

            def do_POST(self) -> None:
                server._handle(self)

            def do_GET(self) -> None:
                self._send(404, b'{"error": {"message": "only POST /v1/chat/completions"}}')

            def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass                  # the client gave up (timeout); nothing to do

        self._handler_cls = Handler
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="fake-llm", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def remaining(self) -> int:
        return len(self.steps)

    # ---- answering ------------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = None
        rec = Received(h.path, {k.lower(): v for k, v in h.headers.items()}, body, arrived=time.monotonic())
        with self._lock:
            self.requests.append(rec)
            step = self.steps.pop(0) if self.steps else None
        send = h._send  # type: ignore[attr-defined]  # a method of the handler class above
        if not h.path.rstrip("/").endswith("/chat/completions"):
            send(404, _error_body(f"unknown path {h.path}; the fake serves POST /v1/chat/completions", 404))
            return
        if step is None:
            if not self.by_prompt:
                send(400, _error_body("fake server: the transcript is exhausted", 400))
                return
            step = Step()
        if step.delay_s or self.delay_s:
            time.sleep(step.delay_s or self.delay_s)
        if step.raw_body is not None:
            send(step.status, step.raw_body, step.headers)
            return
        if step.status != 200:
            auth = rec.headers.get("authorization", "").removeprefix("Bearer ")
            send(step.status, _error_body(step.error_message.replace("{auth}", auth), step.status), step.headers)
            return
        text = step.text
        if text is None:
            with self._lock:
                queue = self.by_prompt.get(rec.prompt)
                text = (queue.pop(0) if len(queue) > 1 else queue[0]) if queue else None
            if text is None:
                send(400, _error_body("fake server: no scripted reply for this prompt (the run diverged from "
                                      "the recording)", 400))
                return
        usage = step.usage or {"prompt_tokens": max(1, len(rec.prompt) // 4),
                               "completion_tokens": max(1, len(text) // 4)}
        usage = {**usage, "total_tokens": usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)}
        payload = {"id": f"chatcmpl-fake-{len(self.requests)}", "object": "chat.completion",
                   "created": int(time.time()), "model": step.model or self.model,
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                "finish_reason": step.finish_reason}],
                   "usage": usage}
        send(200, json.dumps(payload).encode(), step.headers)
        rec.answered = time.monotonic()

    def max_concurrent(self) -> int:
        """The most requests that were being answered at the same moment."""
        events = sorted([(r.arrived, 1) for r in self.requests if r.answered is not None] +
                        [(r.answered, -1) for r in self.requests if r.answered is not None])
        now = peak = 0
        for _, d in events:
            now += d
            peak = max(peak, now)
        return peak


def _error_body(message: str, status: int) -> bytes:
    kind = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_exceeded"}.get(
        status, "server_error")
    return json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()
