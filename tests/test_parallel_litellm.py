"""search.parallel=4 through the real litellm path: model requests are in flight side by side.

An offline run with the same settings records every prompt and reply; a local OpenAI-compatible server
serves them back after a fixed delay (a model's latency). Measurements come from the scripted evaluator
(deterministic), so the prompts repeat exactly. The server sees several requests at once, and the run
makes the same decisions as the recording.
"""

from pathlib import Path

import pytest

from tests.fake_llm_server import FakeLLMServer
from tests.test_litellm_search import ROUNDS, recorded_prompts, run_search, scripted  # noqa: F401 (fixture)
from tests.test_parallel import check_journal, cycle_work, owner_decisions


@pytest.mark.slow
def test_parallel_cycles_ask_the_model_concurrently(tmp_path: Path):
    over = ["search.parallel=4", "search.max_rounds=8"]
    offline = tmp_path / "offline"
    out0 = run_search(offline, *over)
    table = recorded_prompts(offline)
    live = tmp_path / "live"
    with FakeLLMServer(by_prompt=table, model="gpt-4o-mini", delay_s=0.5) as srv:
        out1 = run_search(live, "llm=litellm", "llm.model=openai/gpt-4o-mini", f"llm.api_base={srv.api_base}",
                          *over)
    assert srv.max_concurrent() >= 2, "no two model requests were ever answered at the same time"
    check_journal(live)
    assert owner_decisions(live) == owner_decisions(offline)
    assert cycle_work(live) == cycle_work(offline)
    assert (out1.best.solution_id, out1.best.score) == (out0.best.solution_id, out0.best.score)
    assert out1.evaluations == out0.evaluations
