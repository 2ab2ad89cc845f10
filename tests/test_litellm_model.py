"""The real litellm path (litellm -> OpenAI SDK -> HTTP) against a local scripted server: retries,
give-ups, usage and cost, parameters passed through, and API keys kept out of everything returned."""

import time

import pytest

from ksearch.llm import USAGE_KEYS, build_model
from ksearch.llm.base import ModelError, ModelRequest
from tests.fake_llm_server import FakeLLMServer, delay, error, malformed, reply

KEY = "sk-test-DO-NOT-LEAK-0123456789abcdef"
REQ = ModelRequest("code", "action", "Write the kernel.", {"task": "t"})


@pytest.fixture(autouse=True)
def dummy_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def model_for(srv, name="openai/fake-model", **kw):
    kw.setdefault("retry_base_s", 0.01)
    kw.setdefault("retry_max_s", 0.05)
    kw.setdefault("timeout_s", 5.0)
    return build_model("litellm", model=name, api_base=srv.api_base, cache_dir="off", **kw)


def test_reply_usage_cost_and_parameters_reach_the_server():
    with FakeLLMServer([reply("```python\ndef run():\n    pass\n```", usage={"prompt_tokens": 1000,
                                                                              "completion_tokens": 200})],
                       model="gpt-4o-mini") as srv:
        m = model_for(srv, "openai/gpt-4o-mini", temperature=0.3, max_tokens=321)
        r = m.complete(ModelRequest("edit", "propose", "PROMPT", {}, ["bad rating"]))
    assert r.text.startswith("```python") and r.model == "openai/gpt-4o-mini"
    body = srv.requests[0].body
    assert body["temperature"] == 0.3 and body["max_tokens"] == 321 and "reasoning_effort" not in body
    assert body["messages"][0]["content"].startswith("PROMPT") and "bad rating" in body["messages"][0]["content"]
    assert srv.requests[0].headers["authorization"] == f"Bearer {KEY}"
    u = r.usage
    assert set(USAGE_KEYS) <= set(u)
    assert (u["prompt_tokens"], u["completion_tokens"], u["tries"], u["cached"]) == (1000, 200, 1, False)
    # gpt-4o-mini's price is in litellm's bundled table: 1000 x 0.15/M + 200 x 0.6/M
    assert u["cost_known"] and u["cost_usd"] == pytest.approx(1000 * 0.15e-6 + 200 * 0.6e-6, rel=1e-6)
    assert u["latency_s"] > 0 and u["served_model"] == "gpt-4o-mini"


def test_reasoning_effort_reaches_the_server():
    with FakeLLMServer([reply("ok")]) as srv:
        model_for(srv, "openai/my-reasoner", reasoning_effort="high", temperature=1.0).complete(REQ)
    assert srv.requests[0].body["reasoning_effort"] == "high" and srv.requests[0].body["temperature"] == 1.0


def test_a_parameter_the_model_does_not_take_is_a_clear_error_not_a_retry():
    with FakeLLMServer([reply("never asked")], model="gpt-4o-mini") as srv:
        with pytest.raises(ModelError, match="reasoning_effort.*unset llm.temperature, llm.reasoning_effort"):
            model_for(srv, "openai/gpt-4o-mini", reasoning_effort="high").complete(REQ)
    assert not srv.requests


def test_unset_parameters_are_not_sent_and_unknown_prices_are_marked():
    with FakeLLMServer([reply("hello")]) as srv:
        r = model_for(srv).complete(REQ)
    body = srv.requests[0].body
    assert not {"temperature", "reasoning_effort", "max_tokens"} & set(body)
    assert r.usage["cost_usd"] == 0.0 and r.usage["cost_known"] is False and r.usage["prompt_tokens"] > 0


def test_rate_limits_server_errors_timeouts_and_garbled_bodies_are_retried():
    steps = [error(429), error(500), error(503), error(502), delay(2.0), malformed(), reply("finally")]
    with FakeLLMServer(steps) as srv:
        t0 = time.monotonic()
        r = model_for(srv, timeout_s=0.5, max_retries=6).complete(REQ)
        took = time.monotonic() - t0
    assert r.text == "finally" and r.usage["tries"] == 7 and len(srv.requests) == 7
    assert took < 10


def test_gives_up_after_the_retry_budget_with_what_it_saw():
    with FakeLLMServer([error(503, "overloaded")] * 5) as srv:
        with pytest.raises(ModelError, match=r"no answer after 3 tries.*code/action.*overloaded") as ei:
            model_for(srv, max_retries=2).complete(REQ)
    assert len(srv.requests) == 3 and srv.remaining == 2
    assert ei.value.usage["tries"] == 3


@pytest.mark.parametrize("status,hint", [(400, "refused the request"), (401, "API key"), (404, "llm.model"),
                                         (422, "refused the request")])
def test_client_errors_are_not_retried(status, hint):
    with FakeLLMServer([error(status, "nope"), reply("never asked")]) as srv:
        with pytest.raises(ModelError, match=hint):
            model_for(srv, max_retries=4).complete(REQ)
    assert len(srv.requests) == 1 and srv.remaining == 1


def test_failed_tries_that_returned_usage_are_paid_for():
    steps = [reply("", usage={"prompt_tokens": 100, "completion_tokens": 7}),
             reply("ok", usage={"prompt_tokens": 100, "completion_tokens": 3})]
    with FakeLLMServer(steps, model="gpt-4o-mini") as srv:
        r = model_for(srv, "openai/gpt-4o-mini").complete(REQ)
    assert r.text == "ok" and r.usage["tries"] == 2
    assert (r.usage["prompt_tokens"], r.usage["completion_tokens"]) == (200, 10)
    assert r.usage["cost_usd"] == pytest.approx(200 * 0.15e-6 + 10 * 0.6e-6, rel=1e-6)


def test_a_reply_cut_off_before_any_text_is_not_retried():
    steps = [reply("", finish_reason="length", usage={"prompt_tokens": 10, "completion_tokens": 64}),
             reply("never asked")]
    with FakeLLMServer(steps) as srv:
        with pytest.raises(ModelError, match="llm.max_tokens") as ei:
            model_for(srv, max_tokens=64).complete(REQ)
    assert len(srv.requests) == 1 and ei.value.usage["completion_tokens"] == 64


def test_retry_after_is_honoured_but_capped():
    with FakeLLMServer([error(429, headers={"Retry-After": "30"}), reply("ok")]) as srv:
        t0 = time.monotonic()
        assert model_for(srv, retry_max_s=0.2).complete(REQ).text == "ok"
    assert 0.15 < time.monotonic() - t0 < 5


def test_a_reply_without_code_is_still_a_reply():
    with FakeLLMServer([reply("I would tile it differently, but here is no code.")]) as srv:
        r = model_for(srv).complete(REQ)
    assert "no code" in r.text and r.usage["tries"] == 1


def test_api_keys_never_leave_in_errors_or_usage(monkeypatch):
    monkeypatch.setenv("ANOTHER_SERVICE_TOKEN", "tok-ALSO-SECRET-987654")
    steps = [error(500, "upstream saw key {auth} and tok-ALSO-SECRET-987654")] * 2 + \
            [error(401, "Incorrect API key provided: {auth}")]
    with FakeLLMServer(steps) as srv:
        m = model_for(srv, max_retries=1)
        with pytest.raises(ModelError) as retried:
            m.complete(REQ)
        with pytest.raises(ModelError) as auth:
            m.complete(REQ)
    assert all(r.headers["authorization"] == f"Bearer {KEY}" for r in srv.requests)   # the key was in play
    for e in (retried.value, auth.value):
        text = str(e) + repr(e.usage)
        assert KEY not in text and "tok-ALSO-SECRET-987654" not in text
        assert e.__cause__ is None and (e.__context__ is None or e.__suppress_context__)   # nothing raw chained
    assert "[REDACTED:OPENAI_API_KEY]" in str(auth.value)
    assert "[REDACTED:ANOTHER_SERVICE_TOKEN]" in str(retried.value)


def test_keyless_openai_compatible_server(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with FakeLLMServer([reply("ok")]) as srv:
        assert model_for(srv, "openai/local-vllm-model").complete(REQ).text == "ok"
    assert srv.requests[0].headers["authorization"] == "Bearer ksearch-no-key"


def test_bad_settings_are_refused_before_any_call():
    with pytest.raises(ModelError, match="llm.model"):
        build_model("litellm", model=None)
    with pytest.raises(ModelError, match="unknown llm settings"):
        build_model("litellm", model="openai/x", temprature=0.1)
    with pytest.raises(ModelError, match="unknown llm.kind"):
        build_model("gpt")


def test_an_unreachable_server_is_retried_then_reported():
    with FakeLLMServer() as srv:
        base = srv.api_base                     # the port is closed once the server stops
    m = build_model("litellm", model="openai/x", api_base=base, cache_dir="off", max_retries=1, retry_base_s=0.01,
                    timeout_s=2.0)
    with pytest.raises(ModelError, match=r"no answer after 2 tries.*llm.api_base"):
        m.complete(REQ)
