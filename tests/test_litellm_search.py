"""A whole search driven through the real litellm path, then replayed without a network.

1. The offline model runs a short search; its journal holds every prompt and reply.
2. A local OpenAI-compatible server serves those replies back, keyed by prompt text (after a rate limit
   and a server error, which are retried), and the same search runs with llm=litellm against it: it
   must make the same decisions.
3. llm.replay=<the litellm run> re-runs it with no server at all: the same decisions again, every answer
   free.
Measurements come from a scripted evaluator (deterministic, instant), so prompts that carry them match
exactly across runs.
"""

from pathlib import Path

import pytest

from ksearch.cli.app import compose_config, execute
from ksearch.store import read_records
from ksearch.store import records as R
from tests.fake_llm_server import FakeLLMServer, error
from tests.fakes import ScriptedEvaluator, by_block

KEY = "sk-test-search-SECRET-0123456789"
ROUNDS = 4


class ScriptedEvaluatorFactory(ScriptedEvaluator):
    """Stands in for ksearch.eval.parent.evaluator.Evaluator(task, settings)."""

    def __init__(self, task=None, settings=None):
        super().__init__(by_block)

    def close(self):
        pass


@pytest.fixture(autouse=True)
def scripted(monkeypatch):
    import ksearch.eval.parent.evaluator as ev

    monkeypatch.setattr(ev, "Evaluator", ScriptedEvaluatorFactory)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("KSEARCH_LLM_RETRY_BASE_S", "0.01")


def run_search(run_dir: Path, *overrides: str):
    # memory=off: each run starts from the catalog, as the first did (with memory, a later run would start
    # from what the earlier ones found, and ask other questions than the recording holds)
    cfg = compose_config([f"run.dir={run_dir}", "run.live=false", f"search.max_rounds={ROUNDS}", "eval.device=cpu",
                          "memory=off", *overrides])
    return execute(cfg, run_dir, fresh=True)


# Record fields that are not decisions: timing, spend, which model answered and what it cost.
_VOLATILE = {"t", "seq", "usage", "spend", "model", "config", "elapsed_s", "wall_s"}


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in _VOLATILE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def decisions(run_dir: Path) -> list[dict]:
    records, _ = read_records(run_dir / "journal.jsonl")
    out = []
    for r in records:
        if isinstance(r, R.ModelCall):
            out.append({"kind": "model", "key": r.key, "text": r.value["text"]})
        elif not isinstance(r, R.ConfigChange):
            out.append(_strip(r.to_json()))
    return out


def recorded_prompts(run_dir: Path) -> dict[str, list[str]]:
    """Full prompt -> the replies it got, in order (what the fake server will say)."""
    from ksearch.llm.base import ModelRequest

    table: dict[str, list[str]] = {}
    for r in R.of_kind(read_records(run_dir / "journal.jsonl")[0], R.ModelCall):
        table.setdefault(ModelRequest.from_json(r.request).full_prompt(), []).append(r.value["text"])
    return table


@pytest.mark.slow
def test_litellm_search_matches_the_recording_and_replays_without_network(tmp_path):
    offline = tmp_path / "offline"
    out0 = run_search(offline)
    assert out0.best is not None and out0.evaluations == ROUNDS
    table = recorded_prompts(offline)
    assert len(table) >= 3

    live = tmp_path / "live"
    with FakeLLMServer([error(429), error(503)], by_prompt=table, model="gpt-4o-mini") as srv:
        out1 = run_search(live, "llm=litellm", "llm.model=openai/gpt-4o-mini", f"llm.api_base={srv.api_base}",
                          "llm.temperature=0.2")
    served = [r for r in srv.requests if r.body]
    assert len(served) == sum(len(v) for v in table.values()) + 2     # every request, plus two retried tries
    assert all(r.body["temperature"] == 0.2 for r in served)
    assert decisions(live) == decisions(offline)
    assert (out1.best.solution_id, out1.best.score) == (out0.best.solution_id, out0.best.score)
    model_recs = R.of_kind(read_records(live / "journal.jsonl")[0], R.ModelCall)
    assert model_recs[0].usage["tries"] == 3                # the rate limit and 503 were retried
    assert all(r.usage["cost_usd"] > 0 and not r.usage["cached"] for r in model_recs)
    assert (live / "llm_cache").is_dir()

    replayed = tmp_path / "replayed"         # the server is gone: any network call would fail
    out2 = run_search(replayed, "llm=litellm", "llm.model=openai/gpt-4o-mini", f"llm.replay={live}")
    assert decisions(replayed) == decisions(live)
    assert (out2.best.solution_id, out2.best.score) == (out1.best.solution_id, out1.best.score)
    replay_recs = R.of_kind(read_records(replayed / "journal.jsonl")[0], R.ModelCall)
    assert all(r.usage["cached"] and r.usage["cost_usd"] == 0.0 for r in replay_recs)
    assert out2.spend.cost_usd == 0.0 and out1.spend.cost_usd > 0

    for run in (live, replayed):            # the API key reached the server, never the run directories
        for p in run.rglob("*"):
            if p.is_file():
                assert KEY not in p.read_text(errors="replace"), p
    assert all(r.headers.get("authorization") == f"Bearer {KEY}" for r in served)


def test_a_replay_that_diverges_stops_with_a_clear_error(tmp_path):
    offline = tmp_path / "offline"
    run_search(offline, "search.max_rounds=2")
    with pytest.raises(Exception, match="diverged from the recording"):
        run_search(tmp_path / "other", "search.max_rounds=2", "task=mla_paged_decode_h16_ckv512_kpe64_ps1",
                   f"llm.replay={offline}", "llm.replay_measurements=false")
    assert not R.of_kind(read_records(tmp_path / "other" / "journal.jsonl")[0], R.ModelCall)
