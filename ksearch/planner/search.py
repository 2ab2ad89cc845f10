"""The search loop: world model -> selection -> action cycle -> evaluation -> world-model update.

Follows K-Search's action cycles (reference/k-search-algorithm.md section 2) with its weak points fixed:
per-node failure counts that retire hopeless actions, a hard cap on rounds per cycle, the seed kernel
eligible as the returned best, a difficulty cap that is never raised, a noise-aware comparison of
measurements (a candidate replaces the best only when it is faster beyond the timing spread, near-ties
are re-measured side by side), and a deterministic fallback when the model cannot produce a valid edit.

Every model answer and every measurement goes through the journal, so a killed run resumes exactly
where it stopped. Settings may change between segments of a run (resume with overrides): each segment
replays under the settings it ran with, and the change is recorded where the new segment went live.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import jinja2
from omegaconf import OmegaConf

from ksearch.config import Config, to_plain
from ksearch.eval.noise import compare_reports
from ksearch.eval.report import BaselineTimes, EvalReport
from ksearch.instantiate import CodeExtractionError, Solution, solution_from_text
from ksearch.instantiate.language import CUDA, language_of
from ksearch.llm.base import Model, ModelError, ModelRequest
from ksearch.planner.selection import calibration, choose_next, explain
from ksearch.planner.validation import Validation    # [shapes] held-out confirmation of a new best
from ksearch.planner.regions import RegionBoard, finish_with_dispatch   # [shapes] per-region incumbents
from ksearch.store import Journal, RunDir
from ksearch.store.fork import ForkSeed, seed_record
from ksearch.task import Task, Workload
from ksearch.world_model import AttachedSolution, EditResult, Node, WorldModel, render_compact, render_frontier
from ksearch.world_model.fallback import fallback_edit
from ksearch.world_model.tree import ROOT_ID

_PROMPTS = jinja2.Environment(
    loader=jinja2.ChoiceLoader([jinja2.PackageLoader("ksearch.world_model", "prompts"),
                                jinja2.PackageLoader("ksearch.instantiate", "prompts")]),
    undefined=jinja2.StrictUndefined, keep_trailing_newline=True)

#: Settings sections that a resumed segment may change; the rest would change what recorded numbers mean.
CHANGEABLE_SECTIONS = ("search", "llm")
CHANGEABLE_EVAL_KEYS = ("timeout_s", "remeasure_near_ties")


class EvaluatorLike(Protocol):
    def evaluate(self, source: str, solution_id: str, workloads: list[Workload],
                 baseline: BaselineTimes | None) -> EvalReport: ...

    def measure_baselines(self, workloads: list[Workload]) -> BaselineTimes: ...

    def remeasure(self, entries: list[tuple[str, str]], workloads: list[Workload],
                  baseline: BaselineTimes | None) -> list[EvalReport]: ...


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
    validate_score: float | None = None   # [shapes] geomean on the held-out validate set (None: off/unscored)
    validate_set: str | None = None       # [shapes]


@dataclass
class Spend:
    """Model usage so far (replayed requests included: they were paid for when first asked)."""

    requests: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, usage: dict[str, Any]) -> None:
        if usage.get("cached"):
            self.cached += 1
            return
        self.requests += 1
        self.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        self.completion_tokens += int(usage.get("completion_tokens") or 0)
        self.cost_usd += float(usage.get("cost_usd") or 0.0)


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
    spend: Spend = field(default_factory=Spend)


def settings_diff(old: Any, new: Any) -> dict[str, list[Any]]:
    """Changed leaves between two configs, as {"a.b": [old, new]}, for the sections a segment may change."""
    a, b = to_plain(old), to_plain(new)
    out: dict[str, list[Any]] = {}

    def walk(x: Any, y: Any, prefix: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                walk(x.get(k), y.get(k), f"{prefix}.{k}" if prefix else k)
        elif x != y:
            out[prefix] = [x, y]

    for section in ("task", "search", "llm", "eval"):
        walk(a.get(section), b.get(section), section)
    return out


def frozen_changes(diff: dict[str, list[Any]]) -> list[str]:
    """Keys in `diff` that a resumed segment must not change (they alter what recorded numbers mean)."""
    bad = []
    for key in diff:
        section, _, rest = key.partition(".")
        if section in CHANGEABLE_SECTIONS or (section == "eval" and rest in CHANGEABLE_EVAL_KEYS):
            continue
        bad.append(key)
    return bad


class _BudgetSpent(Exception):
    pass


class Search:
    def __init__(self, cfg: Config, task: Task, model: Model, evaluator: EvaluatorLike, run: RunDir,
                 journal: Journal, workloads: list[Workload], workload_set: str, device: str,
                 progress: Progress | None = None, fork: ForkSeed | None = None):
        self.requested = cfg                  # the settings asked for now
        self.cfg = cfg                        # the settings in effect (a replayed segment's, until live)
        self.task, self.model, self.evaluator = task, model, evaluator
        self.run_dir, self.journal, self.workloads = run, journal, workloads
        self.workload_set, self.device = workload_set, device
        self.progress = progress or NullProgress()
        self.fork = fork
        self.wm = WorldModel()
        self.best: Best | None = None
        self.baseline: BaselineTimes | None = None
        self.round = 1
        self.evaluations = 0
        self.spend = Spend()
        self.config_epoch = 0
        self.codes: dict[str, str] = {}            # solution_id -> code, for base kernels
        self.hardware = "NVIDIA H200 (Hopper, sm_90a)" if device.startswith("cuda") else \
            "an NVIDIA Hopper GPU (checked here on a CPU with the Triton interpreter)"
        journal.on_info = self._replayed_info
        journal.on_live = self._went_live
        # [shapes] held-out validate set; confirms every new best (ksearch/planner/validation.py)
        self.validation = Validation.for_search(cfg, task, device, workload_set, journal, evaluator, run,
                                                self.progress.message)
        self.regions = RegionBoard(task, workloads)     # [shapes] best kernel per region of the shape space

    # ---- settings segments --------------------------------------------------------------------------
    def _replayed_info(self, rec: dict[str, Any]) -> None:
        if rec["kind"] == "config":
            self._replayed_config(rec)
        elif rec["kind"] == "model_failed":
            self.spend.add(rec.get("usage") or {})

    def _replayed_config(self, rec: dict[str, Any]) -> None:
        self.cfg = OmegaConf.merge(OmegaConf.structured(Config), rec["config"])  # type: ignore[assignment]
        self.config_epoch += 1

    def _went_live(self) -> None:
        """At the live edge: if the settings asked for differ from those in effect, record and switch."""
        diff = settings_diff(self.cfg, self.requested)
        if not diff:
            return
        bad = frozen_changes(diff)
        if bad:
            raise ValueError(f"a resumed run cannot change {', '.join(bad)} (recorded measurements would no "
                             f"longer compare); start a new run, or fork this one: ksearch run "
                             f"fork.from={self.run_dir.path} fork.node=ID ...")
        self.journal.record_info("config", config=to_plain(self.requested), changed=diff)
        self.cfg = self.requested
        self.config_epoch += 1
        self.progress.message("settings changed from here on: " +
                              ", ".join(f"{k}: {v[0]} -> {v[1]}" for k, v in diff.items()))

    # ---- model calls, all through the journal -----------------------------------------------------
    def _budget_reason(self) -> str | None:
        llm = self.cfg.llm
        if llm.max_requests is not None and self.spend.requests >= llm.max_requests:
            return f"model budget spent: {self.spend.requests} requests (llm.max_requests={llm.max_requests})"
        if llm.max_cost_usd is not None and self.spend.cost_usd >= llm.max_cost_usd:
            return (f"model budget spent: ${self.spend.cost_usd:.4f} "
                    f"(llm.max_cost_usd={llm.max_cost_usd})")
        return None

    def _ask(self, req: ModelRequest) -> str:
        reason = self._budget_reason()
        if reason:
            raise _BudgetSpent(reason)

        def compute() -> dict[str, Any]:
            try:
                reply = self.model.complete(req)
            except ModelError as e:
                # What the failed tries cost is kept (a resumed run counts it against the budget), then the
                # run stops with the error; the request itself is asked again on resume.
                usage = getattr(e, "usage", None) or {}
                self.journal.record_info("model_failed", key=req.key(), purpose=req.purpose, error=str(e)[:2000],
                                         usage=usage)
                self.spend.add(usage)
                raise
            return {"text": reply.text, "model": reply.model, "usage": reply.usage}

        value = self.journal.memo("model", req.key(), compute, request=req.to_json())
        self.spend.add(value.get("usage") or {})
        return value["text"]

    def _prompt(self, name: str, **kw: Any) -> str:
        targets = ", ".join(f"{w}: {ms:.4g} ms" for w, ms in (self.baseline.best() if self.baseline else {}).items())
        base = {"hardware": self.hardware, "language": self.cfg.search.language, "task": self.task.name,
                "definition": self.task.definition.render_text(),
                "baseline": self.baseline.label if self.baseline else "the baseline", "targets": targets or "-",
                "regions": self.regions.render()}                       # [shapes] per-region evidence
        return _PROMPTS.get_template(name).render(**{**base, **kw})

    def _edit(self, purpose: str, prompt: str, context: dict[str, Any], max_new_nodes: int,
              node_id: str | None = None) -> EditResult:
        """Ask for an edit script; invalid scripts change nothing and are re-asked with the reasons, then a
        deterministic fallback edit is applied (and recorded as such)."""
        errors: list[str] = []
        result = EditResult(ok=False, errors=["not asked"])
        context = {**context, **self.regions.context(self.codes)}     # [shapes] per-region evidence for the model
        for _ in range(1 + self.cfg.llm.edit_retries):
            spent = self._budget_reason()
            if spent:
                return EditResult(ok=False, errors=[spent])
            req = ModelRequest("init" if purpose == "init" else "edit", purpose, prompt, context, list(errors))
            text = self._ask(req)
            result = self.wm.apply_text(text, round_index=self.round, max_new_nodes=max_new_nodes)
            self.journal.event("edit", check={"purpose": purpose, "ok": result.ok}, errors=result.errors,
                               new_nodes=result.new_node_ids, changed=result.changed_node_ids)
            if result.ok:
                return result
            errors = result.errors
        self.progress.message(f"world-model {purpose} edit rejected {1 + self.cfg.llm.edit_retries} times: "
                              f"{'; '.join(errors)[:300]}")
        if purpose == "init":
            return result
        script = fallback_edit(self.wm, purpose, node_id, reasons=errors, max_new_nodes=max_new_nodes)
        fb = self.wm.apply(script, round_index=self.round, max_new_nodes=max_new_nodes)
        self.journal.event("edit_fallback", check={"purpose": purpose, "ok": fb.ok}, node_id=node_id,
                           model_errors=errors, errors=fb.errors, new_nodes=fb.new_node_ids,
                           changed=fb.changed_node_ids)
        return fb

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
        self.regions.observe(sid, EvalReport.from_json(value))     # [shapes]
        return EvalReport.from_json(value)

    def _remeasure(self, sids: list[str], round_index: int) -> list[EvalReport]:
        """Time several kernels side by side in one job, so drift hits them equally (near-ties)."""
        entries = [(self.codes[s], s) for s in sids]

        def compute() -> dict[str, Any]:
            reports = self.evaluator.remeasure(entries, self.workloads, self.baseline)
            return {"reports": [r.to_json() for r in reports]}

        value = self.journal.memo("remeasure", f"{':'.join(sids)}@{round_index}", compute, round=round_index,
                                  solution_ids=sids)
        return [EvalReport.from_json(r) for r in value["reports"]]

    def _consider_best(self, report: EvalReport, solution_id: str, node_id: str, round_index: int) -> None:
        """A new global best only when it is faster beyond the noise; near-ties are re-measured together."""
        if not report.passed or report.score is None:
            return
        basis = "first passing kernel"
        if self.best is not None:
            incumbent = EvalReport.from_json(self.best.report)
            margin = self.cfg.search.improvement_margin
            verdict = compare_reports(report, incumbent, margin)
            basis = f"{verdict} on first measurement"
            if verdict == "tie" and report.score > self.best.score and self.cfg.eval.remeasure_near_ties \
                    and self.best.solution_id in self.codes and solution_id != self.best.solution_id:
                inc2, new2 = self._remeasure([self.best.solution_id, solution_id], round_index)
                if inc2.passed and new2.passed and inc2.score is not None and new2.score is not None:
                    verdict = compare_reports(new2, inc2, margin)
                    basis = f"{verdict} when re-measured side by side ({new2.score:.4g} vs {inc2.score:.4g})"
                    if verdict == "better":
                        report = new2
                else:
                    verdict, basis = "worse", "failed when re-measured: " + (new2.summary() if not new2.passed
                                                                             else inc2.summary())
            if verdict != "better":
                self.journal.event("not_best", check={"solution_id": solution_id}, score=report.score,
                                   incumbent=self.best.solution_id, basis=basis)
                return
        assert report.score is not None
        confirmed = self.validation.confirm(report, solution_id, round_index)     # [shapes] validate gate
        if not confirmed.accepted:                                                  # [shapes]
            self.journal.event("not_best", check={"solution_id": solution_id}, score=report.score,  # [shapes]
                               incumbent=self.best.solution_id if self.best else None,             # [shapes]
                               basis=f"{basis}; {confirmed.basis}")                                 # [shapes]
            return                                                                  # [shapes]
        self.best = Best(report.score, solution_id, node_id, round_index, report.to_json(),
                         confirmed.report.score if confirmed.report else None,       # [shapes]
                         self.validation.set_name)                                   # [shapes]
        self.journal.event("best", check={"solution_id": solution_id}, score=report.score, node_id=node_id,
                           round=round_index, basis=basis,
                           validate_score=self.best.validate_score, validate_set=self.best.validate_set)  # [shapes]
        self.run_dir.write_best(self.run_dir.load_solution(solution_id), report.to_json(), node_id)

    # ---- set-up ---------------------------------------------------------------------------------------
    def _setup(self) -> None:
        first = self.journal.recorded[0] if self.journal.recorded else None
        if first is not None and first.get("kind") == "run_start" and first.get("config"):
            self._replayed_config({"config": first["config"]})   # replay the first segment as it ran
            self.config_epoch = 0
        self.journal.event("run_start", check={"task": self.task.name, "workload_set": self.workload_set,
                                               "device": self.device},
                           workloads=[w.to_json() for w in self.workloads], model=self.model.name,
                           config=to_plain(self.cfg))
        if self.journal.dropped_bytes:
            self.progress.message(f"the journal's last line was torn ({self.journal.dropped_bytes} bytes, a crash "
                                  f"while writing) and was dropped; that step is redone")
        key = f"{self.device}:{self.workload_set}:{self.cfg.run.seed}"
        self.baseline = BaselineTimes.from_json(self.journal.memo(
            "baseline", key, lambda: self.evaluator.measure_baselines(self.workloads).to_json()))
        self.progress.message(f"baseline: {self.baseline.label}")
        if self.fork is not None:
            self._start_from_fork(self.fork)
        else:
            prompt = self._prompt("init.j2", min_families=2, max_new_nodes=8)
            res = self._edit("init", prompt, {"task": self.task.name}, max_new_nodes=8)
            if not res.ok:
                raise RuntimeError(f"the model could not build an initial world model: {res.errors}")
        if self.cfg.search.seed_solution:
            self._seed(Path(self.cfg.search.seed_solution))
        self._snapshot()

    def _start_from_fork(self, seed: ForkSeed) -> None:
        """The path root..node of another run, with its kernels; measurements carried over only when the
        task, workload set and device match, else the path's kernels are measured again here."""
        comparable = (seed.task, seed.workload_set, seed.device) == (self.task.name, self.workload_set, self.device)
        self.journal.event("fork", check={"from": seed.source, "node": seed.node_id}, seed=seed_record(seed),
                           measurements="carried over" if comparable else "re-measured")
        self.wm = WorldModel.from_json(seed.tree)
        for sol in seed.solutions:
            self.run_dir.save_solution(sol)
            self.codes[sol.solution_id] = sol.main_source
        for node in self.wm.path(seed.node_id):
            if node.solution is None:
                continue
            sid = node.solution.solution_id
            if comparable and sid in seed.reports:
                report = EvalReport.from_json(seed.reports[sid])
            else:
                report = self._evaluate(self.run_dir.load_solution(sid), node.node_id, 0, 0)
                old = node.solution
                self.wm.attach_solution(node.node_id, AttachedSolution(
                    sid, old.parent_solution_id, 0, report.status, report.score, _mean_latency(report)))
            self._consider_best(report, sid, node.node_id, 0)
        self.progress.message(f"forked from {seed.source} at node {seed.node_id} "
                              f"({'measurements carried over' if comparable else 'kernels re-measured'})")

    def _seed(self, path: Path) -> None:
        if not path.is_file():
            raise FileNotFoundError(f"search.seed_solution={path} does not exist")
        sol = solution_from_text(self.task.name, path.read_text(), name=f"seed:{path.name}", author="user", description="")
        report = self._evaluate(sol, ROOT_ID, 0, 0)
        self.codes[sol.solution_id] = sol.main_source
        self.wm.attach_solution(ROOT_ID, AttachedSolution(sol.solution_id, None, 0, report.status, report.score,
                                                          _mean_latency(report)))
        self._consider_best(report, sol.solution_id, ROOT_ID, 0)

    # ---- the loop -----------------------------------------------------------------------------------
    def run(self) -> SearchOutcome:
        self._setup()
        while True:
            try:
                stop = self._loop()
            except _BudgetSpent as e:
                stop = str(e)
            epoch_at_stop = self.config_epoch
            if self.validation.enabled:          # [shapes] one solution dispatching among per-region bests
                finish_with_dispatch(self)       # [shapes]
            self.journal.event("run_end", check={"stop": stop}, evaluations=self.evaluations,
                               best=self.best.__dict__ if self.best else None, spend=self.spend.__dict__)
            self._snapshot()
            if not self.journal.replaying:
                self.journal.go_live()
            if self.config_epoch == epoch_at_stop:
                break
            self.progress.message("continuing under the new settings")
        cfg = self.cfg.search
        return SearchOutcome(self.run_dir.path, min(self.round - 1, cfg.max_rounds), self.evaluations, stop,
                             self.best, self.baseline.label if self.baseline else "", self.device, self.wm,
                             self.spend)

    def _loop(self) -> str:
        while True:
            cfg = self.cfg.search
            if self.round > cfg.max_rounds:
                return "round budget used"
            reason = self._budget_reason()
            if reason:
                return reason
            self._maintain()
            node = choose_next(self.wm, cfg.max_difficulty, cfg.explore_weight, policy=cfg.policy,
                               seed=self.cfg.run.seed, draw=self.round)             # [shapes] random policy
            if node is None:
                return (f"no executable action at difficulty <= {cfg.max_difficulty} "
                        f"(the world model has nothing left to try)")
            why = explain(self.wm, node, policy=cfg.policy, explore_weight=cfg.explore_weight)
            self.journal.event("select", check={"node_id": node.node_id, "round": self.round},
                               title=node.action.title if node.action else "", policy=cfg.policy, why=why)
            self.round += self._cycle(node)

    def _maintain(self) -> None:
        """Ask for new actions when the frontier is empty or the best kernel has no open follow-up."""
        cfg = self.cfg.search
        frontier = [n for n in self.wm.frontier() if n.action and n.action.difficulty <= cfg.max_difficulty]
        best_node = self.wm.best_closed()
        best_has_child = best_node is None or any(c.is_open_action for c in self.wm.children(best_node.node_id))
        if frontier and best_has_child:
            return
        context = {"task": self.task.name, "world_model": self.wm.to_json(),
                   "best_node_id": best_node.node_id if best_node else None,
                   "best_code": self.codes.get(best_node.solution.solution_id) if best_node and best_node.solution else None,
                   "best_score": self.best.score if self.best else None}
        prompt = self._prompt("propose.j2", world_model=render_compact(self.wm), frontier=render_frontier(self.wm),
                              max_new_nodes=cfg.max_new_nodes, best_node_id=context["best_node_id"],
                              best_score=_fmt(context["best_score"]))
        if self._edit("propose", prompt, context, cfg.max_new_nodes, node_id=context["best_node_id"]).ok:
            self._snapshot()

    def _code_request(self, node: Node, mode: str, attempt: int, base_code: str | None, base_score: float | None,
                      cycle_codes: list[str], cycle_best: tuple[str, EvalReport] | None,
                      last: EvalReport | None) -> ModelRequest:
        a = node.action
        assert a is not None
        action_text = f"[{node.node_id}] {a.title}: {a.description} (why: {a.rationale})"
        current = cycle_codes[-1] if cycle_codes else ""
        best_code = cycle_best[0] if cycle_best else ""
        prompt = self._prompt(
            "code.j2", entry="run",
            signature=", ".join(self.task.definition.input_names),
            outputs=" and ".join(self.task.definition.output_names), mode=mode, action=action_text,
            base_code=base_code, base_score=_fmt(base_score), base_fence=_fence(base_code),
            current_code=current, current_fence=_fence(current), last_result=last.summary() if last else "",
            cycle_best_code=best_code, cycle_best_fence=_fence(best_code),
            cycle_best_score=_fmt(cycle_best[1].score if cycle_best else None))
        context = {"task": self.task.name, "node_id": node.node_id, "action_params": a.params, "mode": mode,
                   "attempt": attempt, "base_code": base_code, "cycle_codes": cycle_codes,
                   "cycle_best_code": cycle_best[0] if cycle_best else None}
        return ModelRequest("code", mode, prompt, context)

    def _cycle(self, node: Node) -> int:
        """Run one action cycle on `node`; returns the rounds it used (at least 1)."""
        parent = self.wm.base_of(node.node_id)     # through split steps to the kernel this builds on
        base_sid = parent.solution.solution_id if parent.solution else None
        base_code = self.codes.get(base_sid) if base_sid else None
        base_score = parent.solution.score if parent.solution else None
        cycle_best: tuple[str, EvalReport] | None = None
        cycle_best_sid: str | None = None
        cycle_codes: list[str] = []
        last: EvalReport | None = None
        streak = 0
        k = 0
        while k < self.cfg.search.max_rounds_per_cycle and self.round + k <= self.cfg.search.max_rounds:
            if self._budget_reason():
                break
            attempt, r = k + 1, self.round + k
            mode = "action" if attempt == 1 else ("improve" if cycle_best else "debug")
            self.progress.round_started(r, self.cfg.search.max_rounds, node, attempt, mode)
            req = self._code_request(node, mode, attempt, base_code, base_score, cycle_codes, cycle_best, last)
            text = self._ask(req)
            sid: str | None = None
            try:
                sol = solution_from_text(self.task.name, text, author=self.model.name,
                                                name=f"{self.task.name}_r{r}_{node.node_id}",
                                                description=node.action.title if node.action else "")
            except CodeExtractionError as e:
                # Garbage from the model costs the round but nothing else; the reason goes to the next attempt.
                report = EvalReport("", "COMPILE_ERROR", self.device, log=str(e))
                self.journal.event("bad_code", check={"round": r}, error=str(e))
            else:
                sid = sol.solution_id
                self.codes[sid] = sol.main_source
                cycle_codes.append(sol.main_source)
                report = self._evaluate(sol, node.node_id, attempt, r)
                self._consider_best(report, sid, node.node_id, r)
            self.wm.record_attempt(node.node_id)
            self.progress.attempt_done(r, report, self.best.score if self.best else None)
            last = report
            k += 1
            improved = report.passed and report.score is not None and sid is not None and (
                cycle_best is None or
                compare_reports(report, cycle_best[1], self.cfg.search.improvement_margin) == "better")
            if improved:
                assert sid is not None
                cycle_best, cycle_best_sid, streak = (self.codes[sid], report), sid, 0
            else:
                streak += 1
            if streak >= self.cfg.search.stagnation_window:
                break
        self._close_cycle(node, base_sid, base_score, cycle_best, cycle_best_sid, last, k)
        return max(1, k)

    def _close_cycle(self, node: Node, base_sid: str | None, base_score: float | None,
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
                cycle_best_sid, base_sid, self.round + max(rounds, 1) - 1, report.status, report.score,
                _mean_latency(report)))
            self.journal.event("attach", check={"node_id": node.node_id, "solution_id": cycle_best_sid},
                               score=report.score, parent_score=base_score,
                               predicted=node.action.expected_speedup if node.action else None)
            context.update(score=report.score, node_code=code)
            cal = calibration(self.wm)
            predicted = node.action.expected_speedup if node.action else None
            purpose, template = "after_success", "refine.j2"
            kw = dict(evidence=_evidence(report), code=code, fence=_fence(code),
                      parent_score=_fmt(base_score if base_score is not None else 1.0),
                      predicted=_fmt(predicted), calibration=_fmt(cal.factor) if cal.n else "")
        else:
            retired = self.wm.record_failed_cycle(node.node_id, cfg.max_failed_cycles)
            self.journal.event("cycle_failed", check={"node_id": node.node_id}, retired=retired,
                               status=last.status if last else None)
            code = self.codes.get(last.solution_id, "") if last else ""
            evidence = last.summary() if last else "no attempt"
            context.update(failure=evidence)
            purpose, template = "after_failure", "too_hard.j2"
            kw = dict(evidence=evidence, code=code, fence=_fence(code), attempts=rounds,
                      failed_cycles=node.failed_cycles, max_failed_cycles=cfg.max_failed_cycles)
        # the tree as it stands after closing the node or counting its failure
        context["world_model"] = self.wm.to_json()
        common = dict(world_model=render_compact(self.wm), frontier=render_frontier(self.wm), node_id=node.node_id,
                      action_title=node.action.title if node.action else "", max_new_nodes=cfg.max_new_nodes)
        if self._budget_reason():
            self._snapshot()
            return
        prompt = self._prompt(template, **common, **kw)
        self._edit(purpose, prompt, context, cfg.max_new_nodes, node_id=node.node_id)
        self._snapshot()


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _fence(code: str | None) -> str:
    return "cuda" if code and language_of(code) == CUDA else "python"


def _mean_latency(report: EvalReport) -> float | None:
    lat = [w.latency_ms for w in report.workloads if w.latency_ms is not None]
    return sum(lat) / len(lat) if lat and report.passed else None


def _evidence(report: EvalReport) -> str:
    per = {w.workload: w.latency_ms for w in report.workloads}
    return json.dumps({"status": report.status, "score": report.score, "score_name": report.score_name,
                       "baseline": report.baseline, "latency_ms": per, "speedups": report.speedups})
