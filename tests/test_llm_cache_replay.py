"""Record and replay: the content-addressed response cache, and ReplayModel answering from a recorded run."""

import json
import sys
import types

import pytest

from ksearch.llm import build_model
from ksearch.llm.base import ModelError, ModelReply, ModelRequest, Usage
from ksearch.llm.cache import CachedModel, ResponseCache
from ksearch.llm.replay import ReplayModel
from ksearch.store import Journal
from ksearch.store import records as R
from tests.fake_llm_server import FakeLLMServer, reply

KEY = "sk-test-cache-SECRET-0123456789"


@pytest.fixture(autouse=True)
def dummy_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def litellm_model(srv, **kw):
    kw.setdefault("retry_base_s", 0.01)
    return build_model("litellm", model="openai/gpt-4o-mini", api_base=srv.api_base, **kw)


def req(prompt, kind="code", purpose="action", context=None):
    return ModelRequest(kind, purpose, prompt, context or {"round": 1})


def cache_files(root):
    return sorted(p for p in root.rglob("*") if p.is_file())


# ---- the cache -------------------------------------------------------------------------------------
def test_a_second_run_is_answered_from_the_shared_cache_for_free(tmp_path):
    shared = tmp_path / "shared"
    with FakeLLMServer([reply("answer A", usage={"prompt_tokens": 1000, "completion_tokens": 100})],
                       model="gpt-4o-mini") as srv:
        first = litellm_model(srv, cache_dir=str(shared)).complete(req("P"))
        assert isinstance(litellm_model(srv, cache_dir=str(shared)), CachedModel)
        again = litellm_model(srv, cache_dir=str(shared)).complete(req("P", context={"round": 9}))
    assert len(srv.requests) == 1                       # the second answer cost no call
    assert first.text == again.text == "answer A"
    assert first.usage["cost_usd"] > 0 and not first.usage["cached"]
    assert again.usage["cached"] and again.usage["cost_usd"] == 0.0 and again.usage["tries"] == 0
    assert again.usage["original_cost_usd"] == pytest.approx(first.usage["cost_usd"])
    files = cache_files(shared)
    assert len(files) == 1 and files[0].suffix == ".json" and files[0].parent.name == files[0].stem[:2]
    entry = json.loads(files[0].read_text())
    assert entry["messages"] == [{"role": "user", "content": "P"}]
    assert entry["identity"]["model"] == "openai/gpt-4o-mini"
    assert KEY not in files[0].read_text()


def test_default_cache_is_in_the_run_dir_and_off_disables_it(tmp_path):
    with FakeLLMServer([reply("a"), reply("b")]) as srv:
        litellm_model(srv, run_dir=tmp_path / "run").complete(req("P"))
        assert len(cache_files(tmp_path / "run" / "llm_cache")) == 1
        m = litellm_model(srv, run_dir=tmp_path / "run2", cache_dir="off")
        assert not isinstance(m, CachedModel)
        m.complete(req("P"))
    assert not (tmp_path / "run2" / "llm_cache").exists()


def test_the_same_prompt_twice_gets_two_samples_and_a_rerun_gets_both_in_order(tmp_path):
    with FakeLLMServer([reply("first"), reply("second")]) as srv:
        m = litellm_model(srv, cache_dir=str(tmp_path))
        assert [m.complete(req("P")).text for _ in range(2)] == ["first", "second"]
        rerun = litellm_model(srv, cache_dir=str(tmp_path))
        assert [rerun.complete(req("P")).text for _ in range(2)] == ["first", "second"]
    assert len(srv.requests) == 2


def test_settings_that_change_the_answer_change_the_key(tmp_path):
    with FakeLLMServer([reply("t=0"), reply("t=1")]) as srv:
        assert litellm_model(srv, cache_dir=str(tmp_path), temperature=0.0).complete(req("P")).text == "t=0"
        assert litellm_model(srv, cache_dir=str(tmp_path), temperature=1.0).complete(req("P")).text == "t=1"
        # timeouts and retries do not change the answer: a hit
        assert litellm_model(srv, cache_dir=str(tmp_path), temperature=0.0, timeout_s=9.0,
                             max_retries=1).complete(req("P")).text == "t=0"
    assert len(srv.requests) == 2


def test_a_damaged_entry_is_a_miss_and_is_replaced(tmp_path):
    with FakeLLMServer([reply("one"), reply("two")]) as srv:
        litellm_model(srv, cache_dir=str(tmp_path)).complete(req("P"))
        (path,) = cache_files(tmp_path)
        path.write_text('{"key": "x", "reply": {"te')
        assert litellm_model(srv, cache_dir=str(tmp_path)).complete(req("P")).text == "two"
    assert json.loads(path.read_text())["reply"]["text"] == "two"


def test_writes_are_atomic(tmp_path, monkeypatch):
    class Inner:
        name = "inner"

        def identity(self):
            return {"model": "inner"}

        def complete(self, request):
            return ModelReply("text", "inner", Usage().to_dict())

    import ksearch.store.atomic as atomic_mod  # the cache writes through the one atomic-write helper

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(atomic_mod.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        CachedModel(Inner(), ResponseCache(tmp_path)).complete(req("P"))
    assert cache_files(tmp_path) == []                  # no partial entry, no temp file left behind


def test_a_resumed_run_counts_prompts_it_asked_before(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    j = Journal(run / "journal.jsonl", fsync=False)
    r = req("P")
    j.memo(R.ModelCall(key=r.key(), request=r.to_json()),
           lambda: {"text": "first", "model": "openai/gpt-4o-mini", "usage": {}})
    j.close()
    with FakeLLMServer([reply("first"), reply("second")]) as srv:
        litellm_model(srv, cache_dir=str(tmp_path / "c")).complete(req("P"))     # another run cached "first"
        resumed = litellm_model(srv, run_dir=run, cache_dir=str(tmp_path / "c"))
        assert resumed.complete(req("P")).text == "second"     # its 2nd asking of P, not a repeat of the 1st


# ---- replay ----------------------------------------------------------------------------------------
def record(run_dir, items, model="openai/gpt-4o-mini"):
    run_dir.mkdir(parents=True, exist_ok=True)
    j = Journal(run_dir / "journal.jsonl", fsync=False)
    j.append(R.RunStart(task="t", model=model))
    for r, text in items:
        j.memo(R.ModelCall(key=r.key(), request=r.to_json()),
               lambda text=text: {"text": text, "model": model, "usage": Usage(10, 5, 0.25, True, 1, 0.5).to_dict()})
    j.close()


@pytest.fixture
def no_network(monkeypatch):
    """A litellm that refuses to be called: replay must never reach it."""
    def completion(**kw):
        raise AssertionError("replay made a network call")

    monkeypatch.setitem(sys.modules, "litellm", types.SimpleNamespace(completion=completion))


def test_replay_answers_by_key_in_recorded_order_for_free(tmp_path, no_network):
    a, b = req("A"), req("B", kind="edit", purpose="after_success")
    record(tmp_path / "rec", [(a, "a1"), (b, "b1"), (a, "a2")])
    m = build_model("litellm", model="openai/other", replay=str(tmp_path / "rec"))   # replay wins over kind
    assert isinstance(m, ReplayModel) and m.name == "openai/gpt-4o-mini"
    got = [m.complete(r) for r in (a, b, a, a)]
    assert [g.text for g in got] == ["a1", "b1", "a2", "a2"]
    u = got[0].usage
    assert u["cached"] and u["cost_usd"] == 0.0 and u["original_cost_usd"] == 0.25 and u["replay_match"] == "key"


def test_replay_matches_an_llm_answer_by_prompt_when_only_the_context_differs(tmp_path, no_network):
    record(tmp_path / "rec", [(req("A", context={"round": 1}), "a1")])
    m = build_model("offline", replay=str(tmp_path / "rec"))
    r = m.complete(req("A", context={"round": 7}))
    assert r.text == "a1" and r.usage["replay_match"] == "prompt"


def test_offline_answers_replay_by_key_only(tmp_path):
    record(tmp_path / "rec", [(req("A", context={"round": 1}), "a1")], model="offline")
    m = ReplayModel(tmp_path / "rec")
    assert m.complete(req("A", context={"round": 1})).text == "a1"
    with pytest.raises(ModelError, match="diverged"):
        m.complete(req("A", context={"round": 2}))


def test_a_request_not_in_the_recording_is_a_clear_error(tmp_path, no_network):
    record(tmp_path / "rec", [(req("A"), "a1")])
    m = build_model("litellm", model="openai/x", replay=str(tmp_path / "rec"))
    with pytest.raises(ModelError, match=r"edit/after_failure request.*diverged from the recording"):
        m.complete(req("never asked", kind="edit", purpose="after_failure"))


def test_replay_also_reads_the_recorded_runs_cache(tmp_path, request):
    with FakeLLMServer([reply("from the cache")]) as srv:
        litellm_model(srv, run_dir=tmp_path / "rec").complete(req("C"))
    request.getfixturevalue("no_network")
    (tmp_path / "rec" / "journal.jsonl").write_text("")   # the run died before journaling the answer
    m = ReplayModel(tmp_path / "rec")
    r = m.complete(req("C"))
    assert r.text == "from the cache" and r.usage["replay_match"] == "cache" and r.usage["cached"]


def test_replay_of_something_that_is_not_a_recording(tmp_path):
    with pytest.raises(ModelError, match="no such directory"):
        build_model("offline", replay=str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="no recorded model replies"):
        build_model("offline", replay=str(tmp_path / "empty"))
