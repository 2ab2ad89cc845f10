"""The model seam: garbage answers are rejected without damage, and litellm replies go through the same path."""

import json
import sys
import types

from omegaconf import OmegaConf

from ksearch.config import Config
from ksearch.llm import build_model
from ksearch.llm.base import ModelReply, ModelRequest
from ksearch.llm.offline import OfflineModel
from ksearch.planner.search import Search
from ksearch.store import Journal, RunDir
from ksearch.task import load_task
from tests.test_search import ScriptedEvaluator, by_block

TASK = "gqa_paged_decode_h32_kv4_d128_ps1"


class Flaky:
    """Answers garbage to the first edit request and to the first code request, then behaves."""

    name = "flaky"

    def __init__(self):
        self.inner = OfflineModel()
        self.bad_edit = self.bad_code = True
        self.retries_seen = []

    def complete(self, req: ModelRequest) -> ModelReply:
        if req.kind == "edit" and self.bad_edit:
            self.bad_edit = False
            return ModelReply('{"ops": [{"op": "update_node", "node_id": "fam_split_kv", "patch": {"rating": 42}}]}',
                              self.name)
        if req.kind == "code" and self.bad_code:
            self.bad_code = False
            return ModelReply("I would tile it differently, but here is no code.", self.name)
        if req.retry_errors:
            self.retries_seen.append(req.retry_errors)
        return self.inner.complete(req)


def test_garbage_is_rejected_and_reasons_are_fed_back(tmp_path):
    cfg = OmegaConf.merge(OmegaConf.structured(Config), {"search": {"max_rounds": 5}})
    task = load_task(TASK)
    run = RunDir(tmp_path / "run")
    run.create(OmegaConf.to_yaml(cfg))
    journal = Journal(run.journal_path, fsync=False)
    model = Flaky()
    out = Search(cfg, task, model, ScriptedEvaluator(by_block), run, journal, task.workload_set("tiny"), "tiny",
                 "cpu").run()
    journal.close()
    recs = [json.loads(line) for line in run.journal_path.read_text().splitlines()]
    edits = [r for r in recs if r["kind"] == "edit"]
    assert any(not e["ok"] and any("rating=42" in x for x in e["errors"]) for e in edits)
    assert model.retries_seen and "rating=42" in model.retries_seen[0][0]
    assert any(r["kind"] == "bad_code" for r in recs)             # the round is spent, nothing breaks
    assert out.world_model.node("fam_split_kv").rating <= 10
    assert out.evaluations == 4 and out.best is not None


def test_litellm_model_is_imported_lazily_and_parses_like_offline(monkeypatch):
    calls = []

    class Err(Exception):
        pass

    def completion(**kw):
        calls.append(kw)
        msg = types.SimpleNamespace(content='```json\n{"ops": []}\n```')
        return types.SimpleNamespace(choices=[types.SimpleNamespace(message=msg)], usage={"total_tokens": 7})

    fake = types.SimpleNamespace(completion=completion, completion_cost=lambda **kw: 0.001,
                                 AuthenticationError=Err, NotFoundError=Err, BadRequestError=Err)
    monkeypatch.setitem(sys.modules, "litellm", fake)
    model = build_model("litellm", model="openai/test-model", temperature=0.2)
    reply = model.complete(ModelRequest("edit", "propose", "PROMPT", {}, ["bad rating"]))
    assert reply.text.startswith("```json") and reply.usage["total_tokens"] == 7
    sent = calls[0]["messages"][0]["content"]
    assert sent.startswith("PROMPT") and "bad rating" in sent and calls[0]["temperature"] == 0.2


def test_litellm_needs_a_model_name():
    import pytest

    from ksearch.llm.base import ModelError

    with pytest.raises(ModelError, match="llm.model"):
        build_model("litellm", model=None)
