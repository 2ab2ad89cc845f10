"""What recalled evidence does to a run's start: strong for the same kernel on the same GPU, weak for the
same op type elsewhere; the offline model's first proposals; the task signature; replays."""

import json

from ksearch.knowledge.priors import CatalogPrior, family_starts
from ksearch.knowledge.recall import build_recall, render_recall
from ksearch.knowledge.run_memory import RunMemory, memory_on_at_start
from ksearch.knowledge.signature import signature_of
from ksearch.knowledge.store import EvaluationRow
from ksearch.llm.base import ModelRequest
from ksearch.llm.offline import OfflineModel
from ksearch.task import load_task
from ksearch.task.definition import Axis

TASK = "gqa_paged_decode_h32_kv4_d128_ps1"


def row(family, score, knobs=None, signature="sig", gpu="NVIDIA H200", op="gqa_paged", run="r1", region="all",
        task="t"):
    return EvaluationRow(signature, op, task, gpu, family, knobs or {}, region, "PASSED" if score else "RUNTIME_ERROR",
                         score, None, run, f"{family}{score}", 1, "feedback")


def test_evidence_is_strong_only_for_the_same_kernel_on_the_same_gpu():
    rows = [row("a", 1.2, {"BLOCK_N": 128}), row("a", 1.0, run="r2"), row("b", 0.6), row("b", None),
            row("a", 1.1, region="b1"),
            row("b", 0.5, gpu="cpu"), row("a", 0.25, gpu="cpu"),               # this kernel, another GPU
            row("b", 2.0, signature="other"), row("c", 1.0, signature="other"),  # same op type, another kernel
            row("z", 9.0, op="moe")]                                           # another op type
    r = build_recall(rows, "sig", "gqa_paged", "NVIDIA H200", source="test")
    assert [(f.family, f.evaluations, f.passed, f.best_score, f.best_knobs, f.relative) for f in r.strong] == [
        ("a", 2, 2, 1.2, {"BLOCK_N": 128}, 1.0), ("b", 2, 1, 0.6, {}, 0.5)]
    assert r.strong_runs == 2 and [(x.region, x.family) for x in r.strong_regions] == [("b1", "a")]
    weak = {f.family: f.relative for f in r.weak}
    assert weak == {"b": 1.0, "a": 0.5, "c": 0.5}         # each ranked against the best of its (task, GPU)
    assert all(f.best_score is None for f in r.weak)                      # scores do not carry over
    assert "z" not in weak and set(r.weak_groups) == {"t on cpu", "t on NVIDIA H200"}
    text = render_recall(r)
    assert "- a: 1.2x with BLOCK_N=128 (2 of 2 evaluations passed)" in text and "b 1.00" in text


def test_strong_evidence_sets_the_start_and_weak_evidence_only_nudges():
    priors = [CatalogPrior("a", 0.5, 5.5, 0.5, 0.9), CatalogPrior("b", 0.8, 8.0, 0.6, 1.3),
              CatalogPrior("c", 0.6, 6.5, 0.4, 1.2)]
    strong = build_recall([row("a", 1.2, {"BLOCK_N": 128}), row("b", 0.6)], "sig", "gqa_paged", "NVIDIA H200", "t")
    s = family_starts(priors, strong)
    assert max(s.values(), key=lambda x: x.score).family == "a"            # the catalog's last is now first
    assert s["a"].knobs == {"BLOCK_N": 128} and s["a"].expected_speedup == 1.2 and s["b"].expected_speedup == 0.6
    assert s["c"].expected_speedup == round(1.2 * 1.2 / 0.9, 6)            # calibrated by the best family's miss
    assert s["a"].confidence > priors[0].confidence and "MEMORY" in s["a"].note
    weak = build_recall([row("a", 1.2, signature="other"), row("b", 0.3, signature="other")], "sig", "gqa_paged",
                        "NVIDIA H200", "t")
    w = family_starts(priors, weak)
    assert w["a"].score > priors[0].score and w["b"].score < priors[1].score
    assert all(not x.knobs for x in w.values())
    assert [w[p.family].confidence for p in priors] == [p.confidence for p in priors]
    assert [w[p.family].expected_speedup for p in priors] == [p.expected_speedup for p in priors]


def _init(memory=None):
    ctx = {"task": TASK, **({"memory": memory.to_json()} if memory else {})}
    ops = json.loads(OfflineModel().complete(ModelRequest("init", "init", "", ctx)).text)["ops"]
    return [op["node"] for op in ops]


def test_the_offline_models_first_proposal_is_the_best_family_at_its_best_settings():
    sig = signature_of(load_task(TASK).definition)
    best = {"BLOCK_N": 128, "NUM_WARPS": 8, "NUM_STAGES": 2, "EVICT_FIRST": False, "UNKNOWN": 1}
    recall = build_recall([row("grouped_heads", 0.013, best, signature=sig.digest, gpu="cpu"),
                           row("split_kv", 0.004, signature=sig.digest, gpu="cpu")],
                          sig.digest, sig.op_type, "cpu", "test")
    plain, remembered = _init(), _init(recall)
    assert plain[0]["node_id"] == "fam_split_kv" and remembered[0]["node_id"] == "fam_grouped_heads"
    first = remembered[0]["action"]
    assert first["params"]["set"] == {"BLOCK_N": 128, "NUM_WARPS": 8, "NUM_STAGES": 2, "EVICT_FIRST": False}
    assert "BLOCK_N=128, NUM_WARPS=8" in first["description"] and len(first["title"]) <= 200
    assert first["score"] > next(n for n in remembered if n["node_id"] == "fam_split_kv")["action"]["score"]


def test_weak_evidence_moves_the_offline_models_beliefs_but_sets_no_knobs():
    recall = build_recall([row("grouped_heads", 2.0, {"BLOCK_N": 128}, signature="other"),
                           row("split_kv", 0.5, signature="other")], "sig", "gqa_paged", "cpu", "test")
    plain = {n["node_id"]: n for n in _init()}
    weak = {n["node_id"]: n for n in _init(recall)}
    assert weak["fam_grouped_heads"]["action"]["score"] > plain["fam_grouped_heads"]["action"]["score"]
    assert weak["fam_split_kv"]["action"]["score"] < plain["fam_split_kv"]["action"]["score"]
    assert all(n["action"]["params"]["set"] == {} for n in weak.values())
    assert weak["fam_fused_split_kv"]["action"] == plain["fam_fused_split_kv"]["action"]   # no evidence: as is


def test_the_signature_is_the_definition_not_the_name():
    d = load_task(TASK).definition
    renamed = d.model_copy(update={"name": "my_copy", "description": "another text"})
    more_heads = d.model_copy(update={"axes": {**d.axes, "num_qo_heads": Axis(type="const", value=64)}})
    assert signature_of(renamed).digest == signature_of(d).digest
    assert signature_of(more_heads).digest != signature_of(d).digest
    assert signature_of(more_heads).op_type == signature_of(d).op_type


def test_runs_from_before_memory_recall_nothing_on_resume():
    assert memory_on_at_start({"task": {}}) is False
    assert memory_on_at_start({"memory": {"enabled": True}}) is True
    assert memory_on_at_start({"memory": {"enabled": False}}) is False


def test_a_replay_takes_the_recordings_memory_not_the_store(tmp_path):
    recorded = build_recall([row("a", 1.0)], "sig", "gqa_paged", "cpu", "the recording's store")
    (tmp_path / "journal.jsonl").write_text(json.dumps({"seq": 0, "kind": "memory", "key": "k",
                                                        "value": recorded.to_json()}) + "\n")
    memory = RunMemory(load_task(TASK), recording=tmp_path)
    assert memory._lookup(print) == recorded
    (tmp_path / "journal.jsonl").write_text("")
    assert memory._lookup(print).empty and "recorded no memory" in memory._lookup(print).source
