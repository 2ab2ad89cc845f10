"""Memory across runs in the search: a second run starts where the first ended, memory=off changes
nothing, and a resumed run takes what memory gave it from its journal, never from the live store."""

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ksearch.config import Config
from ksearch.knowledge.recall import Recall, render_recall
from ksearch.knowledge.run_memory import RunMemory
from ksearch.knowledge.store import EvaluationRow, KnowledgeStore
from ksearch.llm.offline import OfflineModel, read_plan_header
from ksearch.planner.search import Search, Services, Target
from ksearch.store import Journal, RunDir, read_records
from ksearch.store import records as R
from ksearch.task import load_task
from tests.test_search import ScriptedEvaluator

TASK = "gqa_paged_decode_h32_kv4_d128_ps1"


def deep_best(plan):
    """The single-pass family with wide tiles is best, but the catalog ranks that family last: a run
    without memory comes to it only after trying the others."""
    knobs, fam = plan["knobs"], plan["family"]
    base = {"split_kv": 1.0, "fused_split_kv": 0.9, "token_chunks": 1.1, "grouped_heads": 1.4}[fam]
    return "PASSED", base * (1 + knobs.get("BLOCK_N", 64) / 256)


def search(tmp_path, name, store_path, judge=deep_best, crash_at=None, enabled=True, memory_write=True, **over):
    cfg = OmegaConf.merge(OmegaConf.structured(Config),
                          {"search": {"max_rounds": 12, **over}, "eval": {"validate": "none"},
                           "memory": {"enabled": enabled, "write": memory_write, "path": str(store_path)}})
    task = load_task(TASK)
    run = RunDir(tmp_path / name)
    if not run.exists():
        run.create(OmegaConf.to_yaml(cfg))
    journal = Journal(run.journal_path, fsync=False)
    memory = RunMemory.for_run(cfg, task)
    ev = ScriptedEvaluator(judge, crash_at)
    s = Search(cfg, Target(task, task.workload_set("tiny"), "tiny", "cpu"),
               Services(OfflineModel(cfg.search.max_new_nodes), ev, memory=memory), run, journal)
    return s, ev, journal, memory


def finish(s, journal, memory):
    try:
        return s.run()
    finally:
        journal.close()
        memory.close()


def records(run_dir, cls=None):
    """The run's journal as typed records (of one type)."""
    recs = read_records(Path(run_dir) / "journal.jsonl")[0]
    return recs if cls is None else R.of_kind(recs, cls)


def plans(run_dir):
    """(round, family, knobs) of every evaluated kernel, in order."""
    out = []
    for r in records(run_dir, R.Evaluation):
        code = (Path(run_dir) / "solutions" / f"{r.solution_id}.json")
        src = json.loads(code.read_text())["sources"][0]["content"] if code.is_file() else None
        plan = read_plan_header(src) if src else None
        out.append((r.round, plan["family"], json.dumps(plan["knobs"], sort_keys=True)))
    return out


def first_round_of(run_dir, family, knobs):
    return next(r for r, f, k in plans(run_dir) if (f, k) == (family, knobs))


def test_a_second_run_reaches_the_first_runs_best_in_fewer_rounds(tmp_path):
    store = tmp_path / "k.sqlite"
    s, ev, j, m = search(tmp_path, "first", store)
    out1 = finish(s, j, m)
    best = read_plan_header((tmp_path / "first" / "best" / "solution.py").read_text())
    best_key = (best["family"], json.dumps(best["knobs"], sort_keys=True))
    rounds_first = first_round_of(tmp_path / "first", *best_key)
    assert rounds_first > 1                        # the landscape hides the best from a run without memory

    s, ev, j, m = search(tmp_path, "second", store)
    out2 = finish(s, j, m)
    rounds_second = first_round_of(tmp_path / "second", *best_key)
    assert rounds_second < rounds_first
    assert rounds_second == 1                       # the best family at its best settings is the first proposal
    assert out2.best.score >= out1.best.score
    recalled = records(tmp_path / "second", R.MemoryRecall)[0].value
    assert Recall.model_validate(recalled).best().family == best["family"]


def test_memory_off_changes_nothing(tmp_path):
    store = tmp_path / "k.sqlite"
    s, ev, j, m = search(tmp_path, "filler", store)      # the store now holds a whole run
    finish(s, j, m)
    rows_before = len(KnowledgeStore(store).rows())

    s, ev, j, m = search(tmp_path, "off", store, enabled=False)
    finish(s, j, m)
    s, ev, j, m = search(tmp_path, "none", tmp_path / "empty.sqlite")     # memory on, nothing stored
    finish(s, j, m)
    assert plans(tmp_path / "off") == plans(tmp_path / "none")
    drop = ("t", "seq", "config")

    def same(run):          # the model's answers without their timing
        out = []
        for r in records(tmp_path / run):
            if not isinstance(r, (R.ModelCall, R.Select, R.Evaluation)):
                continue
            line = {k: v for k, v in r.to_json().items() if k not in drop}
            if isinstance(r, R.ModelCall):
                line["value"] = {**line["value"], "usage": None}
            out.append(line)
        return out
    assert same("off") == same("none")             # the same requests, prompts and choices
    assert records(tmp_path / "off", R.MemoryRecall) == []
    assert len(KnowledgeStore(store).rows()) == rows_before      # nothing written either


def test_resume_takes_its_memory_from_the_journal_not_the_live_store(tmp_path):
    store = tmp_path / "k.sqlite"
    s, ev, j, m = search(tmp_path, "first", store)
    finish(s, j, m)
    s, ev, j, m = search(tmp_path, "full", store)           # what an uninterrupted second run does
    finish(s, j, m)
    # The store as the second run saw it, copied, so the cut run starts from the same evidence.
    cut_store = tmp_path / "cut.sqlite"
    with KnowledgeStore(cut_store) as dst:
        dst.add([r for r in KnowledgeStore(store).rows() if r.run_id.startswith("first-")])

    s, ev, j, m = search(tmp_path, "cut", cut_store, crash_at=4)
    with pytest.raises(KeyboardInterrupt):
        finish(s, j, m)
    with KnowledgeStore(cut_store) as live:                 # the store changes under the stopped run
        live.clear()
        r = KnowledgeStore(store).rows()[0]
        live.add([EvaluationRow(r.signature, r.op_type, r.task, r.gpu, "split_kv", {"BLOCK_N": 16}, "all", "PASSED",
                                99.0, None, "other-run", "x", 1, "tiny")])
    s, ev, j, m = search(tmp_path, "cut", cut_store)
    finish(s, j, m)
    assert len(records(tmp_path / "cut", R.MemoryRecall)) == 1
    assert records(tmp_path / "cut", R.MemoryRecall)[0].value == records(tmp_path / "full", R.MemoryRecall)[0].value | \
        {"source": str(cut_store)}
    assert plans(tmp_path / "cut") == plans(tmp_path / "full")     # it went on exactly as it started


def test_the_llm_is_told_what_earlier_runs_found(tmp_path):
    store = tmp_path / "k.sqlite"
    s, ev, j, m = search(tmp_path, "first", store, max_rounds=6)
    finish(s, j, m)
    s, ev, j, m = search(tmp_path, "second", store, max_rounds=1)
    finish(s, j, m)
    init = next(r for r in records(tmp_path / "second", R.ModelCall) if r.request.get("kind") == "init")
    recall = Recall.model_validate(init.request["context"]["memory"])
    assert render_recall(recall) in init.request["prompt"]
    best = recall.best()
    assert f"- {best.family}: {best.best_score:.4g}x" in init.request["prompt"]
    first_init = next(r for r in records(tmp_path / "first", R.ModelCall) if r.request.get("kind") == "init")
    assert "What earlier runs found" not in first_init.request["prompt"]
    assert "memory" not in first_init.request["context"]


def test_memory_write_false_recalls_but_adds_nothing(tmp_path):
    store = tmp_path / "k.sqlite"
    s, ev, j, m = search(tmp_path, "first", store, max_rounds=4)
    finish(s, j, m)
    before = KnowledgeStore(store).rows()
    s, ev, j, m = search(tmp_path, "reader", store, max_rounds=4, memory_write=False)
    finish(s, j, m)
    assert not Recall.model_validate(records(tmp_path / "reader", R.MemoryRecall)[0].value).empty
    assert KnowledgeStore(store).rows() == before
