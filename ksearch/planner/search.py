"""The search loop: world model -> selection -> action cycle -> evaluation -> world-model update.

Follows K-Search's action cycles (reference/k-search-algorithm.md section 2) with its weak points fixed:
per-node failure counts that retire hopeless actions, a hard cap on rounds per cycle, the seed kernel
eligible as the returned best, and a difficulty cap that is never raised. Every model answer and every
evaluation goes through the journal, so a killed run resumes exactly where it stopped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import jinja2

from ksearch.config import Config
from ksearch.eval.report import BaselineTimes, EvalReport
from ksearch.instantiate import CodeExtractionError, Solution, extract_python
from ksearch.llm.base import Model, ModelRequest
from ksearch.planner.selection import choose_next
from ksearch.store import Journal, RunDir
from ksearch.task import Task, Workload
from ksearch.world_model import (AttachedSolution, EditResult, EditScriptError, Node, WorldModel, parse_edit_text,
                                 render_compact, render_frontier)
from ksearch.world_model.tree import ROOT_ID

_PROMPTS = jinja2.Environment(loader=jinja2.PackageLoader("ksearch.llm", "prompts"),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


class EvaluatorLike(Protocol):
    def evaluate(self, source: str, solution_id: str, workloads: list[Workload],
                 baseline: BaselineTimes | None) -> EvalReport: ...

    def measure_baselines(self, workloads: list[Workload]) -> BaselineTimes: ...


class Progress(Protocol):
    def round_started(self, round_index: int, max_rounds: int, node: Node, attempt: int, mode: str) -> None: ...
    def attempt_done(self, round_index: int, report: EvalReport, best_score: float | None) -> None: ...
    def message(self, text: str) -> None: ...


class NullProgress:
    def round_started(self, *a: Any) -> None: ...
    def attempt_done(self, *a: Any) -> None: ...
    def message(self, text: str) -> None: ...


@dataclass
class Best:
    score: float
    solution_id: str
    node_id: str
    round_index: int
    report: dict[str, Any]


@dataclass
class SearchOutcome:
    run_dir: Path
    rounds_used: int
    evaluations: int
    stop_reason: str
    best: Best | None
    baseline_label: str
    device: str
    world_model: WorldModel = field(repr=False, default_factory=WorldModel)


class Search:
    def __init__(self, cfg: Config, task: Task, model: Model, evaluator: EvaluatorLike, run: RunDir,
                 journal: Journal, workloads: list[Workload], workload_set: str, device: str,
                 progress: Progress | None = None):
        self.cfg, self.task, self.model, self.evaluator = cfg, task, model, evaluator
        self.run_dir, self.journal, self.workloads = run, journal, workloads
        self.workload_set, self.device = workload_set, device
        self.progress = progress or NullProgress()
        self.wm = WorldModel()
        self.best: Best | None = None
        self.baseline: BaselineTimes | None = None
        self.round = 1
        self.evaluations = 0
        self.codes: dict[str, str] = {}            # solution_id -> code, for base kernels
        self.language = "triton"
        self.hardware = "NVIDIA H200 (Hopper, sm_90)" if device.startswith("cuda") else \
            "an NVIDIA GPU (checked on a CPU with the Triton interpreter)"

    # ---- model calls, all through the journal -----------------------------------------------------
    def _ask(self, req: ModelRequest) -> str:
        def compute() -> dict[str, Any]:
            reply = self.model.complete(req)
            return {"text": reply.text, "model": reply.model, "usage": reply.usage}

        value = self.journal.memo("model", req.key(), compute, request=req.to_json())
        return value["text"]

    def _prompt(self, name: str, **kw: Any) -> str:
        return _PROMPTS.get_template(name).render(hardware=self.hardware, language=self.language,
                                                  task=self.task.name, **kw)

    def _edit(self, purpose: str, prompt: str, context: dict[str, Any], max_new_nodes: int) -> EditResult:
        """Ask for an edit script; invalid scripts change nothing and are re-asked with the reasons."""
        errors: list[str] = []
        result = EditResult(ok=False, errors=["not asked"])
        for _ in range(1 + self.cfg.llm.edit_retries):
            req = ModelRequest("init" if purpose == "init" else "edit", purpose, prompt, context, list(errors))
            text = self._ask(req)
            try:
                script = parse_edit_text(text)
                result = self.wm.apply(script, round_index=self.round, max_new_nodes=max_new_nodes)
            except EditScriptError as e:
                result = EditResult(ok=False, errors=e.reasons)
            self.journal.event("edit", check={"purpose": purpose, "ok": result.ok}, errors=result.errors,
                               new_nodes=result.new_node_ids, changed=result.changed_node_ids)
            if result.ok:
                return result
            errors = result.errors
        self.progress.message(f"world-model {purpose} edit rejected {1 + self.cfg.llm.edit_retries} times: "
                              f"{'; '.join(errors)[:300]}")
        return result

    def _snapshot(self) -> None:
        tree = self.wm.to_json()
        self.journal.event("tree", round=self.round, tree=tree)
        self.run_dir.write_tree(tree)

    # ---- evaluation -------------------------------------------------------------------------------
    def _evaluate(self, solution: Solution, node_id: str, attempt: int, round_index: int) -> EvalReport:
        self.run_dir.save_solution(solution)
        sid = solution.solution_id

        def compute() -> dict[str, Any]:
            return self.evaluator.evaluate(solution.main_source, sid, self.workloads, self.baseline).to_json()

        value = self.journal.memo("evaluation", f"{sid}@{round_index}", compute, round=round_index,
                                  node_id=node_id, attempt=attempt, solution_id=sid)
        self.evaluations += 1
        return EvalReport.from_json(value)

    def _consider_best(self, report: EvalReport, solution_id: str, node_id: str, round_index: int) -> None:
        if not report.passed or report.score is None:
            return
        if self.best is None or report.score > self.best.score:
            self.best = Best(report.score, solution_id, node_id, round_index, report.to_json())
            self.journal.event("best", check={"solution_id": solution_id}, score=report.score, node_id=node_id,
                               round=round_index)
            self.run_dir.write_best(self.run_dir.load_solution(solution_id), report.to_json(), node_id)

    # ---- set-up ---------------------------------------------------------------------------------------
    def _setup(self) -> None:
        self.journal.event("run_start", check={"task": self.task.name, "workload_set": self.workload_set,
                                               "device": self.device},
                           workloads=[w.to_json() for w in self.workloads], model=self.model.name)
        key = f"{self.device}:{self.workload_set}:{self.cfg.run.seed}"
        self.baseline = BaselineTimes.from_json(self.journal.memo(
            "baseline", key, lambda: self.evaluator.measure_baselines(self.workloads).to_json()))
        self.progress.message(f"baseline: {self.baseline.label}")
        prompt = self._prompt("init.j2", definition=self.task.definition.render_text(), min_families=2,
                              max_new_nodes=8)
        res = self._edit("init", prompt, {"task": self.task.name}, max_new_nodes=8)
        if not res.ok:
            raise RuntimeError(f"the model could not build an initial world model: {res.errors}")
        if self.cfg.search.seed_solution:
            self._seed(Path(self.cfg.search.seed_solution))
        self._snapshot()

    def _seed(self, path: Path) -> None:
        if not path.is_file():
            raise FileNotFoundError(f"search.seed_solution={path} does not exist")
        code = extract_python(path.read_text())
        sol = Solution.from_code(self.task.name, code, name=f"seed:{path.name}", author="user")
        report = self._evaluate(sol, ROOT_ID, 0, 0)
        self.codes[sol.solution_id] = code
        self.wm.attach_solution(ROOT_ID, AttachedSolution(sol.solution_id, None, 0, report.status, report.score,
                                                          _mean_latency(report)))
        self._consider_best(report, sol.solution_id, ROOT_ID, 0)

    # ---- the loop -----------------------------------------------------------------------------------
    def run(self) -> SearchOutcome:
        self._setup()
        cfg = self.cfg.search
        stop = "round budget used"
        while self.round <= cfg.max_rounds:
            self._maintain()
            node = choose_next(self.wm, cfg.max_difficulty, cfg.explore_weight)
            if node is None:
                stop = (f"no executable action at difficulty <= {cfg.max_difficulty} "
                        f"(the world model has nothing left to try)")
                break
            self.journal.event("select", check={"node_id": node.node_id, "round": self.round},
                               title=node.action.title if node.action else "")
            self.round += self._cycle(node)
        self.journal.event("run_end", check={"stop": stop}, evaluations=self.evaluations,
                           best=self.best.__dict__ if self.best else None)
        self._snapshot()
        return SearchOutcome(self.run_dir.path, min(self.round - 1, cfg.max_rounds), self.evaluations, stop,
                             self.best, self.baseline.label if self.baseline else "", self.device, self.wm)

    def _maintain(self) -> None:
        """Ask for new actions when the frontier is empty or the best kernel has no open follow-up."""
        frontier = [n for n in self.wm.frontier() if n.action and n.action.difficulty <= self.cfg.search.max_difficulty]
        best_node = self.wm.best_closed()
        best_has_child = best_node is None or any(c.is_open_action for c in self.wm.children(best_node.node_id))
        if frontier and best_has_child:
            return
        context = {"task": self.task.name, "world_model": self.wm.to_json(),
                   "best_node_id": best_node.node_id if best_node else None,
                   "best_code": self.codes.get(best_node.solution.solution_id) if best_node and best_node.solution else None,
                   "best_score": self.best.score if self.best else None}
        prompt = self._prompt("edit.j2", purpose="propose", world_model=render_compact(self.wm),
                              frontier=render_frontier(self.wm), max_new_nodes=self.cfg.search.max_new_nodes,
                              best_node_id=context["best_node_id"], best_score=context["best_score"])
        if self._edit("propose", prompt, context, self.cfg.search.max_new_nodes).ok:
            self._snapshot()

    def _code_request(self, node: Node, mode: str, attempt: int, base_code: str | None, base_score: float | None,
                      cycle_codes: list[str], cycle_best: tuple[str, EvalReport] | None,
                      last: EvalReport | None) -> ModelRequest:
        a = node.action
        assert a is not None
        action_text = f"[{node.node_id}] {a.title}: {a.description} (why: {a.rationale})"
        targets = ", ".join(f"{w}: {ms:.4g} ms" for w, ms in (self.baseline.best() if self.baseline else {}).items())
        prompt = self._prompt(
            "code.j2", definition=self.task.definition.render_text(), entry="run",
            signature=", ".join(self.task.definition.input_names),
            outputs=" and ".join(self.task.definition.output_names), mode=mode, action=action_text,
            base_code=base_code, base_score=base_score, current_code=cycle_codes[-1] if cycle_codes else "",
            last_result=last.summary() if last else "", cycle_best_code=cycle_best[0] if cycle_best else "",
            cycle_best_score=cycle_best[1].score if cycle_best else None, targets=targets)
        context = {"task": self.task.name, "node_id": node.node_id, "action_params": a.params, "mode": mode,
                   "attempt": attempt, "base_code": base_code, "cycle_codes": cycle_codes,
                   "cycle_best_code": cycle_best[0] if cycle_best else None}
        return ModelRequest("code", mode, prompt, context)

    def _cycle(self, node: Node) -> int:
        """Run one action cycle on `node`; returns the rounds it used (at least 1)."""
        cfg = self.cfg.search
        parent = self.wm.parent(node.node_id)
        assert parent is not None
        base_sid = parent.solution.solution_id if parent.solution else None
        base_code = self.codes.get(base_sid) if base_sid else None
        base_score = parent.solution.score if parent.solution else None
        cycle_best: tuple[str, EvalReport] | None = None
        cycle_best_sid: str | None = None
        cycle_codes: list[str] = []
        last: EvalReport | None = None
        streak = 0
        k = 0
        while k < cfg.max_rounds_per_cycle and self.round + k <= cfg.max_rounds:
            attempt, r = k + 1, self.round + k
            mode = "action" if attempt == 1 else ("improve" if cycle_best else "debug")
            self.progress.round_started(r, cfg.max_rounds, node, attempt, mode)
            req = self._code_request(node, mode, attempt, base_code, base_score, cycle_codes, cycle_best, last)
            text = self._ask(req)
            sid: str | None = None
            try:
                code = extract_python(text)
            except CodeExtractionError as e:
                # Garbage from the model costs the round but nothing else; the reason goes to the next attempt.
                report = EvalReport("", "COMPILE_ERROR", self.device, log=str(e))
                self.journal.event("bad_code", check={"round": r}, error=str(e))
            else:
                sol = Solution.from_code(self.task.name, code, author=self.model.name,
                                         name=f"{self.task.name}_r{r}_{node.node_id}",
                                         description=node.action.title if node.action else "")
                sid = sol.solution_id
                self.codes[sid] = code
                cycle_codes.append(code)
                report = self._evaluate(sol, node.node_id, attempt, r)
                self._consider_best(report, sid, node.node_id, r)
            self.wm.record_attempt(node.node_id)
            self.progress.attempt_done(r, report, self.best.score if self.best else None)
            last = report
            k += 1
            margin = 1.0 + cfg.improvement_margin
            if report.passed and report.score is not None and sid is not None and \
                    (cycle_best is None or report.score > (cycle_best[1].score or 0.0) * margin):
                cycle_best, cycle_best_sid, streak = (self.codes[sid], report), sid, 0
            else:
                streak += 1
            if streak >= cfg.stagnation_window:
                break
        self._close_cycle(node, parent, base_sid, base_score, cycle_best, cycle_best_sid, last, k)
        return max(1, k)

    def _close_cycle(self, node: Node, parent: Node, base_sid: str | None, base_score: float | None,
                     cycle_best: tuple[str, EvalReport] | None, cycle_best_sid: str | None,
                     last: EvalReport | None, rounds: int) -> None:
        cfg = self.cfg.search
        context: dict[str, Any] = {"task": self.task.name, "node_id": node.node_id,
                                   "best_score": self.best.score if self.best else None,
                                   "parent_score": base_score}
        if cycle_best is not None and cycle_best_sid is not None:
            code, report = cycle_best
            # Closed even when slower than its parent: multi-step plans may get slower before faster.
            self.wm.attach_solution(node.node_id, AttachedSolution(
                cycle_best_sid, base_sid, self.round + rounds - 1, report.status, report.score, _mean_latency(report)))
            self.journal.event("attach", check={"node_id": node.node_id, "solution_id": cycle_best_sid},
                               score=report.score, parent_score=base_score)
            purpose, evidence = "after_success", _evidence(report)
            context.update(world_model=self.wm.to_json(), score=report.score, node_code=code)
        else:
            retired = self.wm.record_failed_cycle(node.node_id, cfg.max_failed_cycles)
            self.journal.event("cycle_failed", check={"node_id": node.node_id}, retired=retired,
                               status=last.status if last else None)
            code = self.codes.get(last.solution_id, "") if last else ""
            purpose, evidence = "after_failure", (last.summary() if last else "no attempt")
            context.update(world_model=self.wm.to_json(), failure=evidence)
        prompt = self._prompt("edit.j2", purpose=purpose, world_model=render_compact(self.wm),
                              frontier=render_frontier(self.wm), node_id=node.node_id, evidence=evidence,
                              code=code, max_new_nodes=cfg.max_new_nodes)
        self._edit(purpose, prompt, context, cfg.max_new_nodes)
        self._snapshot()


def _mean_latency(report: EvalReport) -> float | None:
    lat = [w.latency_ms for w in report.workloads if w.latency_ms is not None]
    return sum(lat) / len(lat) if lat and report.passed else None


def _evidence(report: EvalReport) -> str:
    per = {w.workload: w.latency_ms for w in report.workloads}
    return json.dumps({"status": report.status, "score": report.score, "score_name": report.score_name,
                       "baseline": report.baseline, "latency_ms": per, "speedups": report.speedups})
