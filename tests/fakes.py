"""Fakes that several test files share: an evaluator that scores a kernel by its plan header, the judge
that scripts it, a model that fails one request, a hand-written run folder, and a count of a run's journal
records (for tests that stop a run part-way). Single-use fakes stay in their test file."""

import json
from pathlib import Path

from ksearch.eval.report import BaselineTimes, EvalReport, WorkloadResult
from ksearch.llm.offline import OfflineModel, read_plan_header
from ksearch.world_model import Action, AttachedSolution, Node

#: The task whose catalog `by_block` knows (split_kv, grouped_heads, BLOCK_N, num_warps).
TASK = "gqa_paged_decode_h32_kv4_d128_ps1"


class ScriptedEvaluator:
    """Scores a kernel by its plan header: deterministic, instant, no kernels run."""

    def __init__(self, judge, crash_at=None):
        self.judge, self.crash_at, self.calls = judge, crash_at, []

    def measure_baselines(self, workloads):
        return BaselineTimes("cpu", {"reference": {w.name: 1.0 for w in workloads}}, "scripted")

    def evaluate(self, source, solution_id, workloads, baseline):
        if self.crash_at is not None and len(self.calls) + 1 == self.crash_at:
            raise KeyboardInterrupt("simulated kill")
        self.calls.append(solution_id)
        plan = read_plan_header(source)
        status, score = self.judge(plan)
        return scripted_report(solution_id, status, score, workloads, baseline)

    confirm = evaluate          # a held-out confirmation is an evaluation here

    def remeasure(self, entries, workloads, baseline):
        self.remeasured = getattr(self, "remeasured", []) + [[sid for _, sid in entries]]
        calls = list(self.calls)
        try:
            return [self.evaluate(src, sid, workloads, baseline) for src, sid in entries]
        finally:
            self.calls = calls


def scripted_report(solution_id, status, score, workloads, baseline):
    """The report a scripted judge gives: a failure on the first workload, or every workload at 1/score ms
    and the score as the geomean speedup."""
    if status != "PASSED":
        return EvalReport(solution_id, status, "cpu", [WorkloadResult(workloads[0].name, status, "scripted")])
    r = EvalReport(solution_id, "PASSED", "cpu", [WorkloadResult(w.name, "PASSED", latency_ms=1 / score)
                                                   for w in workloads])
    r.score, r.score_name, r.baseline = score, "geomean_speedup", baseline.label
    return r


def by_block(plan):
    """Larger tiles are faster; grouped_heads is slower; one knob value always breaks."""
    knobs = plan["knobs"]
    if knobs.get("num_warps") == 2:
        return "INCORRECT_NUMERICAL", None
    base = 1.0 if plan["family"] == "split_kv" else 0.6
    return "PASSED", base * (1 + knobs.get("BLOCK_N", 32) / 256)


class FlakyModel(OfflineModel):
    """Fails its `fail_at`-th request with a cost, like a provider that gave up after paid retries."""

    def __init__(self, fail_at):
        super().__init__(3)
        self.fail_at, self.n = fail_at, 0

    def complete(self, request):
        self.n += 1
        if self.n == self.fail_at:
            from ksearch.llm.base import ModelError
            raise ModelError("provider gave up", usage={"cost_usd": 0.25, "prompt_tokens": 100})
        return super().complete(request)


def journal_lines(run: Path) -> int:
    """Records the run has written so far (0 before its journal exists)."""
    p = run / "journal.jsonl"
    return p.read_bytes().count(b"\n") if p.exists() else 0


def node_json(node_id, parent, expected=None, score=None, sid=None, parent_sid=None, **kw):
    """A tree node as the journal stores it; a score attaches a passing solution."""
    action = Action(title=f"do {node_id}", expected_speedup=expected) if parent else None
    sol = AttachedSolution(sid, parent_sid, 1, "PASSED", score) if score is not None else None
    return Node(node_id, parent, decision="step", choice=f"choice {node_id}", action=action, solution=sol,
                **kw).to_json()


def _evaluation(seq, t, rnd, node, sid, score, status="PASSED", elapsed=2.0):
    value = {"solution_id": sid, "status": status, "device": "cpu", "elapsed_s": elapsed,
             "workloads": [{"workload": "w1", "status": status, "latency_ms": 1.0 / score if score else None,
                            "message": "" if status == "PASSED" else "boom", "brand_new_field": 1}],
             "score": score, "score_name": "geomean_speedup", "baseline": "scripted",
             "speedups": {"w1": score} if score else {}, "field_from_the_future": True}
    return {"seq": seq, "kind": "evaluation", "t": t, "key": f"{sid}@{rnd}", "round": rnd, "node_id": node,
            "attempt": 1, "solution_id": sid, "value": value}


def write_synthetic_run(path: Path, *, ended=True, torn=True) -> Path:
    """root -> a (pred 1.5x, score 1.2) -> b (pred 2.0x over a, score 1.8); c failed twice and was retired."""
    path.mkdir(parents=True)
    (path / "solutions").mkdir()
    (path / "solutions" / "sa.py").write_text("def run():\n    return 1\n")
    (path / "solutions" / "sb.py").write_text("def run():\n    return 2\n")
    (path / "config.yaml").write_text("task:\n  name: toy_task\nllm:\n  kind: litellm\n  model: openai/x\n"
                                      "search:\n  policy: greedy\nrun:\n  seed: 3\n")
    tree = {"kernel_summary": "toy", "open_questions": [], "active_leaf_id": "b", "nodes": [
        node_json("root", None, notes="root"),
        node_json("a", "root", 1.5, 1.2, "sa"),
        node_json("b", "a", 2.0, 1.8, "sb", "sa", notes="the model thinks b is good"),
        node_json("c", "root", 3.0, retired=True, failed_cycles=2, attempts=2),
        node_json("d", "a", 1.1),
    ]}
    model_value = {"text": "{}", "model": "openai/x",
                   "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120, "cost_usd": 0.25}}
    recs = [
        {"seq": 0, "kind": "run_start", "t": 1000.0, "task": "toy_task", "workload_set": "tiny", "device": "cpu",
         "model": "openai/x"},
        {"seq": 0.5, "kind": "fork", "t": 1000.5, "from": "/runs/src", "node": "n3", "seed": {}},
        {"seq": 1, "kind": "baseline", "t": 1001.0, "key": "k",
         "value": {"device": "cpu", "variants": {"ref": {"w1": 1.0}}, "label": "scripted"}},
        {"seq": 2, "kind": "model", "t": 1002.0, "key": "m1", "request": {"purpose": "init"}, "value": model_value},
        {"seq": 3, "kind": "config", "t": 1002.5, "config": {"search": {"max_rounds": 9}},
         "changed": {"search.max_rounds": [12, 9]}},
        _evaluation(4, 1010.0, 1, "a", "sa", 1.2),
        {"seq": 5, "kind": "best", "t": 1010.5, "solution_id": "sa", "score": 1.2, "node_id": "a", "round": 1},
        {"seq": 6, "kind": "model", "t": 1011.0, "key": "m2", "request": {"purpose": "action"}, "value": model_value},
        _evaluation(7, 1020.0, 2, "c", "sc", None, status="RUNTIME_ERROR"),
        {"seq": 8, "kind": "cycle_failed", "t": 1021.0, "node_id": "c", "retired": True, "status": "RUNTIME_ERROR"},
        {"seq": 9, "kind": "bad_code", "t": 1022.0, "round": 3, "error": "no code"},
        {"seq": 10, "kind": "remeasure", "t": 1023.0, "key": "r", "value": {"whatever": 1}},
        _evaluation(11, 1030.0, 4, "b", "sb", 1.8),
        {"seq": 12, "kind": "best", "t": 1030.5, "solution_id": "sb", "score": 1.8, "node_id": "b", "round": 4},
        {"seq": 12.5, "kind": "not_best", "t": 1030.7, "solution_id": "sx", "score": 1.81, "incumbent": "sb"},
        {"seq": 12.7, "kind": "mystery_kind", "t": 1030.8, "payload": [1, 2]},
        {"seq": 13, "kind": "edit", "t": 1031.0, "purpose": "after_success", "ok": False, "errors": ["bad | op"]},
        {"seq": 14, "kind": "tree", "t": 1032.0, "round": 4, "tree": tree},
    ]
    if ended:
        recs.append({"seq": 15, "kind": "run_end", "t": 1040.0, "stop": "round budget used", "evaluations": 3})
    text = "".join(json.dumps(r) + "\n" for r in recs)
    if torn:
        text += '{"seq": 16, "kind": "evalua'          # killed mid-write
    (path / "journal.jsonl").write_text(text)
    return path
