"""The model seam: garbage answers are rejected without damage, and litellm replies go through the same path."""

import sys
import types

from omegaconf import OmegaConf

from ksearch.config import Config
from ksearch.llm import build_model
from ksearch.llm.base import ModelReply, ModelRequest
from ksearch.llm.offline import OfflineModel
from ksearch.planner.search import Search, Services, Target
from ksearch.store import Journal, RunDir, read_records
from ksearch.store import records as R
from ksearch.task import load_task
from tests.fakes import ScriptedEvaluator, by_block

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
    out = Search(cfg, Target(task, task.workload_set("tiny"), "tiny", "cpu"),
                 Services(model, ScriptedEvaluator(by_block)), run, journal).run()
    journal.close()
    recs = read_records(run.journal_path)[0]
    edits = R.of_kind(recs, R.Edit)
    assert any(not e.ok and any("rating=42" in x for x in e.errors) for e in edits)
    assert model.retries_seen and "rating=42" in model.retries_seen[0][0]
    assert R.of_kind(recs, R.BadCode)                            # the round is spent, nothing breaks
    assert out.world_model.node("fam_split_kv").rating <= 10
    assert out.evaluations == 4 and out.best is not None


def test_litellm_model_is_imported_lazily_and_parses_like_offline(monkeypatch):
    calls = []

    class Err(Exception):
        pass

    def completion(**kw):
        calls.append(kw)
        msg = types.SimpleNamespace(content='```json\n{"ops": []}\n```')
        return types.SimpleNamespace(choices=[types.SimpleNamespace(message=msg, finish_reason="stop")],
                                     usage={"prompt_tokens": 5, "completion_tokens": 2})

    fake = types.SimpleNamespace(completion=completion, completion_cost=lambda **kw: 0.001,
                                 AuthenticationError=Err, NotFoundError=Err, BadRequestError=Err)
    monkeypatch.setitem(sys.modules, "litellm", fake)
    model = build_model("litellm", model="openai/test-model", temperature=0.2)
    reply = model.complete(ModelRequest("edit", "propose", "PROMPT", {}, ["bad rating"]))
    assert reply.text.startswith("```json")
    assert (reply.usage["prompt_tokens"], reply.usage["completion_tokens"], reply.usage["cost_usd"]) == (5, 2, 0.001)
    assert reply.usage["tries"] == 1 and reply.usage["cost_known"] and not reply.usage["cached"]
    sent = calls[0]["messages"][0]["content"]
    assert sent.startswith("PROMPT") and "bad rating" in sent and calls[0]["temperature"] == 0.2


def test_litellm_needs_a_model_name():
    import pytest

    from ksearch.llm.base import ModelError

    with pytest.raises(ModelError, match="llm.model"):
        build_model("litellm", model=None)


def test_importing_the_seam_and_the_offline_model_does_not_import_litellm():
    import subprocess

    code = ("import sys; from ksearch.llm import build_model; from ksearch.llm.base import ModelRequest; "
            "m = build_model('offline', max_new_nodes=2, model=None, temperature=None, edit_retries=3, "
            "max_cost_usd=1.0, max_requests=5, replay=None, cache_dir=None); "
            "assert 'litellm' not in sys.modules, 'litellm imported'; print(m.name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "offline"


def test_offline_replies_carry_the_usage_keys():
    from ksearch.llm import USAGE_KEYS

    req = ModelRequest("init", "init", "P", {"task": TASK})
    u = OfflineModel().complete(req).usage
    assert set(USAGE_KEYS) <= set(u) and u["cost_usd"] == 0.0 and u["cost_known"] and u["tries"] == 1
