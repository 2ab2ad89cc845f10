"""The search loop: world model -> selection -> action cycle -> evaluation -> world-model update.

Follows K-Search's action cycles (reference/k-search-algorithm.md section 2) with its weak points fixed:
per-node failure counts that retire hopeless actions, a hard cap on rounds per cycle, the seed kernel
eligible as the returned best, a difficulty cap that is never raised, a noise-aware comparison of
measurements (planner/incumbent.py), and a deterministic fallback when the model cannot produce a valid
edit.

Every model answer and every measurement goes through the journal, so a killed run resumes exactly
where it stopped. Settings may change between segments of a run (planner/settings.py). With
`search.parallel=N` up to N cycles run side by side (planner/parallel.py); this module is the owner of
the world model and the journal's ordered events in both modes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ksearch.config import Config, to_plain
from ksearch.eval.report import BaselineTimes, EvalReport
from ksearch.instantiate import CodeExtractionError, Solution, solution_from_text
from ksearch.knowledge.recall import render_recall
from ksearch.knowledge.run_memory import RunMemory
from ksearch.llm.base import Model, ModelError, ModelRequest
from ksearch.planner.budget import BudgetSpent, Spend, model_budget_reason
from ksearch.planner.cycle import Attempt, CycleState
from ksearch.planner.incumbent import Best, Incumbent
from ksearch.planner.prompts import Prompts, evidence, fence, fmt, mean_latency
from ksearch.planner.selection import calibration, choose_next, explain
from ksearch.planner.settings import (CHANGEABLE_EVAL_KEYS, CHANGEABLE_SECTIONS, Segments, frozen_changes,  # noqa: F401
                                      settings_diff)
from ksearch.planner.regions import RegionBoard, finish_with_dispatch
from ksearch.planner.validation import Validation
from ksearch.profile import read_profile, render_profile
from ksearch.store import Journal, RunDir
from ksearch.store.best_manifest import BestMember
from ksearch.store.fork import ForkSeed, seed_record
from ksearch.store.records import ConfigChange, ModelFailed, RunStart, parse_record
from ksearch.store.short_ids import ShortIds
from ksearch.task import Task, Workload
from ksearch.world_model import AttachedSolution, EditResult, Node, WorldModel, render_compact, render_frontier
from ksearch.world_model.fallback import fallback_edit
from ksearch.world_model.tree import ROOT_ID

__all__ = ["Search", "SearchOutcome", "Best", "Spend", "settings_diff", "frozen_changes", "EvaluatorLike"]


class EvaluatorLike(Protocol):
    def evaluate(self, source: str, solution_id: str, workloads: list[Workload],
                 baseline: BaselineTimes | None) -> EvalReport: ...

    def measure_baselines(self, workloads: list[Workload]) -> BaselineTimes: ...

    def remeasure(self, entries: list[tuple[str, str]], workloads: list[Workload],
                  baseline: BaselineTimes | None) -> list[EvalReport]: ...


class Progress(Protocol):
    def round_started(self, round_index: int, max_rounds: int, node: Node, attempt: int, mode: str,
                      short_id: str | None = None) -> None: ...
    def attempt_done(self, round_index: int, report: EvalReport, best_score: float | None) -> None: ...
    def message(self, text: str) -> None: ...


class NullProgress:
    def round_started(self, *a: Any) -> None: ...
    def attempt_done(self, *a: Any) -> None: ...
    def message(self, text: str) -> None: ...


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


@dataclass
class CloseRequest:
    """The close-of-cycle edit request: its pieces, so the owner can re-ask with reasons."""

    purpose: str
    prompt: str
    context: dict[str, Any]
    text: str | None = None                # the first answer, when it was asked by the cycle's thread
    usage: dict[str, Any] = field(default_factory=dict)


class Search:
    def __init__(self, cfg: Config, task: Task, model: Model, evaluator: EvaluatorLike, run: RunDir,
                 journal: Journal, workloads: list[Workload], workload_set: str, device: str,
                 progress: Progress | None = None, fork: ForkSeed | None = None, memory: RunMemory | None = None):
        self.task, self.model, self.evaluator = task, model, evaluator
        self.memory = memory or RunMemory.disabled(task)      # the knowledge store across runs
        self.run_dir, self.journal, self.workloads = run, journal, workloads
        self.workload_set, self.device = workload_set, device
        self.progress = progress or NullProgress()
        self.fork = fork
        self.wm = WorldModel()
        self.round = 1                             # the next round label
        self.rounds_used = 0                       # rounds spent (labels may skip in a parallel run)
        self.evaluations = 0
        self.cycles = 0                            # cycle ids handed out so far
        self.spend = Spend()
        self.codes: dict[str, str] = {}            # solution_id -> code, for base kernels
        self.prompts = Prompts(task, device)
        self._save_lock = threading.Lock()
        # held-out confirmation of every new best, and the best kernel per region of the shape space
        self.validation = Validation.for_search(cfg, task, device, workload_set, journal, evaluator, run,
                                                self.progress.message)
        self.regions = RegionBoard(task, workloads)
        # nodes named as `ksearch show` names them (numbered in the order the tree snapshots show them)
        self.short_ids = ShortIds()
        self.incumbent = Incumbent(journal, run, self._remeasure, self.validation, member=self.best_member)
        self.segments = Segments(cfg, run.path, self._record_change, lambda m: self.progress.message(m))
        journal.on_info = self._replayed_info
        journal.on_live = self.segments.went_live

    # ---- state views --------------------------------------------------------------------------------
    @property
    def cfg(self) -> Config:
        """The settings in effect (a replayed segment's, until the live edge)."""
        return self.segments.cfg

    @property
    def requested(self) -> Config:
        return self.segments.requested

    @property
    def config_epoch(self) -> int:
        return self.segments.epoch

    @property
    def best(self) -> Best | None:
        return self.incumbent.best

    @property
    def baseline(self) -> BaselineTimes | None:
        return self.prompts.baseline

    # ---- settings segments --------------------------------------------------------------------------
    def _replayed_info(self, raw: dict[str, Any]) -> None:
        rec = parse_record(raw)
        if isinstance(rec, ConfigChange):
            self.segments.replayed(rec.config)
        elif isinstance(rec, ModelFailed):
            self.spend.add(rec.usage)

    def _record_change(self, config: dict[str, Any], diff: dict[str, Any]) -> None:
        self.journal.record_info("config", config=config, changed=diff)

    # ---- model calls, all through the journal -----------------------------------------------------
    def _budget_reason(self) -> str | None:
        return model_budget_reason(self.cfg.llm, self.spend)

    def _ask(self, req: ModelRequest, cycle: int | None = None) -> str:
        reason = self._budget_reason()
        if reason:
            raise BudgetSpent(reason)
        value = self._ask_recorded(req, cycle)
        self.spend.add(value.get("usage") or {})
        return value["text"]

    def _ask_recorded(self, req: ModelRequest, cycle: int | None) -> dict[str, Any]:
        """The model's answer from the journal, else asked and recorded (thread-safe with `cycle`)."""
        def compute() -> dict[str, Any]:
            try:
                reply = self.model.complete(req)
            except ModelError as e:
                # What the failed tries cost is kept (a resumed run counts it against the budget), then the
                # run stops with the error; the request itself is asked again on resume.
                usage = getattr(e, "usage", None) or {}
                self.journal.record_info("model_failed", from_cycle=cycle is not None, key=req.key(),
                                         purpose=req.purpose, error=str(e)[:2000], usage=usage, cycle=cycle)
                if cycle is None:
                    self.spend.add(usage)
                raise
            return {"text": reply.text, "model": reply.model, "usage": reply.usage}

        return self.journal.memo("model", req.key(), compute, cycle=cycle, request=req.to_json())

    def _edit(self, purpose: str, prompt: str, context: dict[str, Any], max_new_nodes: int,
              node_id: str | None = None, first_text: str | None = None, cycle: int | None = None) -> EditResult:
        """Ask for an edit script; invalid scripts change nothing and are re-asked with the reasons, then a
        deterministic fallback edit is applied (and recorded as such). `first_text`: the first answer,
        already asked by a cycle's thread."""
        errors: list[str] = []
        result = EditResult(ok=False, errors=["not asked"])
        for i in range(1 + self.cfg.llm.edit_retries):
            if first_text is not None and i == 0:
                text = first_text
            else:
                spent = self._budget_reason()
                if spent:
                    return EditResult(ok=False, errors=[spent])
                req = ModelRequest("init" if purpose == "init" else "edit", purpose, prompt, context, list(errors))
                text = self._ask(req, cycle)
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
        self.short_ids.add_snapshot(tree)
        self.run_dir.write_tree(tree)

    def short_id(self, node_id: str) -> str:
        """The node's short id, as `ksearch show` prints it."""
        return self.short_ids.short(node_id)

    def best_member(self, solution_id: str, node_id: str, regions: tuple[str, ...] = (),
                    fallback: bool = False) -> BestMember:
        """How best/manifest.json names the node that produced a kernel of the best."""
        step = self.wm.node(node_id).step if node_id in self.wm else ""
        return BestMember(solution_id, node_id, self.short_id(node_id), step, regions, fallback)

    # ---- evaluation -------------------------------------------------------------------------------
    def _evaluate(self, solution: Solution, node_id: str, attempt: int, round_index: int,
                  cycle: int | None = None) -> EvalReport:
        """Measure a kernel (recorded; in a cycle's thread when `cycle` is given). Counted by the owner."""
        with self._save_lock:              # cycles side by side may store the same kernel
            self.run_dir.save_solution(solution)
        sid = solution.solution_id

        def compute() -> dict[str, Any]:
            return self.evaluator.evaluate(solution.main_source, sid, self.workloads, self.baseline).to_json()

        meta: dict[str, Any] = dict(round=round_index, node_id=node_id, attempt=attempt, solution_id=sid)
        value = self.journal.memo("evaluation", f"{sid}@{round_index}", compute, cycle=cycle, **meta)
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
        self.incumbent.consider(report, solution_id, node_id, round_index,
                                margin=self.cfg.search.improvement_margin,
                                # on a CPU the interpreter's times only order kernels: a side-by-side
                                # re-measurement there costs more than it can tell
                                remeasure_ties=self.cfg.eval.remeasure_near_ties and self.device.startswith("cuda"),
                                have_code=self.codes.__contains__)

    # ---- set-up ---------------------------------------------------------------------------------------
    def _setup(self) -> None:
        first = parse_record(self.journal.recorded[0]) if self.journal.recorded else None
        if isinstance(first, RunStart) and first.config:
            self.segments.replay_first(first.config)   # replay the first segment as it ran
        start = self.journal.event("run_start", check={"task": self.task.name, "workload_set": self.workload_set,
                                                       "device": self.device},
                                   workloads=[w.to_json() for w in self.workloads], model=self.model.name,
                                   config=to_plain(self.cfg))
        if self.journal.dropped_bytes:
            self.progress.message(f"the journal's last line was torn ({self.journal.dropped_bytes} bytes, a crash "
                                  f"while writing) and was dropped; that step is redone")
        key = f"{self.device}:{self.workload_set}:{self.cfg.run.seed}"
        self.prompts.baseline = BaselineTimes.from_json(self.journal.memo(
            "baseline", key, lambda: self.evaluator.measure_baselines(self.workloads).to_json()))
        self.progress.message(f"baseline: {self.baseline.label}")
        self.memory.begin(start, self.run_dir.path, self.device, self.workload_set, self.baseline.env)
        if self.fork is not None:
            self._start_from_fork(self.fork)
        else:
            recalled = self.memory.recall(self.journal, self.progress.message)     # journaled: resume replays it
            prompt = self.prompts.render("init.j2", self.cfg.search.language, min_families=2, max_new_nodes=8,
                                         memory=render_recall(recalled))
            res = self._edit("init", prompt, {"task": self.task.name, **recalled.context()}, max_new_nodes=8)
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
                self.evaluations += 1
                self.regions.observe(sid, report, node.node_id)
                old = node.solution
                self.wm.attach_solution(node.node_id, AttachedSolution(
                    sid, old.parent_solution_id, 0, report.status, report.score, mean_latency(report)))
            self._consider_best(report, sid, node.node_id, 0)
        self.progress.message(f"forked from {seed.source} at node {seed.node_id} "
                              f"({'measurements carried over' if comparable else 'kernels re-measured'})")

    def _seed(self, path: Path) -> None:
        if not path.is_file():
            raise FileNotFoundError(f"search.seed_solution={path} does not exist")
        sol = solution_from_text(self.task.name, path.read_text(), name=f"seed:{path.name}", author="user",
                                 description="")
        report = self._evaluate(sol, ROOT_ID, 0, 0)
        self.evaluations += 1
        self.regions.observe(sol.solution_id, report, ROOT_ID)
        self.codes[sol.solution_id] = sol.main_source
        self.wm.attach_solution(ROOT_ID, AttachedSolution(sol.solution_id, None, 0, report.status, report.score,
                                                          mean_latency(report)))
        self._consider_best(report, sol.solution_id, ROOT_ID, 0)
        if report.passed:
            self.progress.message(f"seed solution {path}: {report.summary()}; attached to the root, the search "
                                  f"keeps it as the best until a kernel beats it")
        else:
            self.progress.message(f"warning: seed solution {path} did not pass and is not used (the search "
                                  f"starts from the catalog's families): {report.summary()}")

    # ---- the loop -----------------------------------------------------------------------------------
    def run(self) -> SearchOutcome:
        self._setup()
        while True:
            try:
                stop = self._loop()
            except BudgetSpent as e:
                stop = str(e)
            epoch_at_stop = self.config_epoch
            if self.validation.enabled:          # one solution dispatching among the per-region bests
                finish_with_dispatch(self)
            self.journal.event("run_end", check={"stop": stop}, evaluations=self.evaluations,
                               best=self.best.__dict__ if self.best else None, spend=self.spend.__dict__)
            self._snapshot()
            if not self.journal.replaying:
                self.journal.go_live()
            if self.config_epoch == epoch_at_stop:
                break
            self.progress.message("continuing under the new settings")
        rounds_used = min(self.rounds_used, self.cfg.search.max_rounds)
        return SearchOutcome(self.run_dir.path, rounds_used, self.evaluations, stop, self.best,
                             self.baseline.label if self.baseline else "", self.device, self.wm, self.spend)

    def _loop(self) -> str:
        """Serial cycles, or cycles side by side when search.parallel > 1 (re-read as settings change)."""
        while True:
            if self.cfg.search.parallel > 1:
                from ksearch.planner.parallel import ParallelLoop

                stop = ParallelLoop(self).run()
                if stop is not None:
                    return stop
                continue                       # settings went back to one cycle at a time
            stop = self._serial_step()
            if stop is not None:
                return stop

    def stop_reason(self) -> str | None:
        """Why no further cycle may start (round or model budget), or None."""
        if self.round > self.cfg.search.max_rounds:
            return "round budget used"
        return self._budget_reason()

    def no_action_reason(self) -> str:
        return (f"no executable action at difficulty <= {self.cfg.search.max_difficulty} "
                f"(the world model has nothing left to try)")

    def _serial_step(self) -> str | None:
        """One cycle, the way K-Search runs them: select, attempts, close. Returns a stop reason or None."""
        cfg = self.cfg.search
        reason = self.stop_reason()
        if reason:
            return reason
        self.maintain()
        node = self.select()
        if node is None:
            return self.no_action_reason()
        state = self.start_cycle(node, self.round, cfg.max_rounds_per_cycle)
        while state.k < self.cfg.search.max_rounds_per_cycle and self.round + state.k <= self.cfg.search.max_rounds:
            if self._budget_reason():
                break
            self.progress.round_started(state.next_round, self.cfg.search.max_rounds, node, state.k + 1, state.mode,
                                        self.short_id(node.node_id))
            attempt = self.produce_attempt(state, cycle=state.cycle, charge=True)
            self.apply_attempt(state, attempt)
            state.record(attempt)
            if state.stagnated():
                break
        self.close_cycle(state, None)
        self.round += max(1, state.k)
        self.rounds_used += max(1, state.k)
        return None

    def _fork_anchor(self) -> Any:
        """A fork grows from its node (fork.node=X expands X), until X has children of its own."""
        if self.fork is None or self.fork.node_id not in self.wm:
            return None
        node = self.wm.node(self.fork.node_id)
        return node if node.is_closed and not self.wm.children(node.node_id) else None

    # ---- pieces shared by the serial and the parallel loop -------------------------------------------
    def maintain(self, busy: frozenset[str] = frozenset()) -> None:
        """Ask for new actions when the frontier (less nodes in flight) is empty or the best kernel has no
        open follow-up."""
        cfg = self.cfg.search
        frontier = [n for n in self.wm.frontier() if n.action and n.action.difficulty <= cfg.max_difficulty
                    and n.node_id not in busy]
        best_node = self._fork_anchor() or self.wm.best_closed()
        best_has_child = best_node is None or any(c.is_open_action for c in self.wm.children(best_node.node_id))
        if frontier and best_has_child:
            return
        context = {"task": self.task.name, "world_model": self.wm.to_json(),
                   "best_node_id": best_node.node_id if best_node else None,
                   "best_code": self.codes.get(best_node.solution.solution_id) if best_node and best_node.solution else None,
                   "best_score": self.best.score if self.best else None, **self.regions.context(self.codes)}
        prompt = self.prompts.render("propose.j2", cfg.language, regions=self.regions.render(),
                                     world_model=render_compact(self.wm),
                                     frontier=render_frontier(self.wm), max_new_nodes=cfg.max_new_nodes,
                                     best_node_id=context["best_node_id"], best_score=fmt(context["best_score"]))
        if self._edit("propose", prompt, context, cfg.max_new_nodes, node_id=context["best_node_id"]).ok:
            self._snapshot()

    def select(self, busy: frozenset[str] = frozenset()) -> Node | None:
        """The next frontier node (never one a cycle in flight works on); its selection is journaled."""
        cfg = self.cfg.search
        node = choose_next(self.wm, cfg.max_difficulty, cfg.explore_weight, policy=cfg.policy, exclude=busy,
                           seed=self.cfg.run.seed, draw=self.cycles + 1)
        if node is None:
            return None
        why = explain(self.wm, node, policy=cfg.policy, explore_weight=cfg.explore_weight)
        self.cycles += 1
        self.journal.event("select", check={"node_id": node.node_id, "round": self.round},
                           title=node.action.title if node.action else "", policy=cfg.policy, why=why,
                           cycle=self.cycles)
        return node

    def start_cycle(self, node: Node, first_round: int, max_attempts: int) -> CycleState:
        parent = self.wm.base_of(node.node_id)     # through split steps to the kernel this builds on
        base_sid = parent.solution.solution_id if parent.solution else None
        cfg = self.cfg.search
        return CycleState(self.cycles, node, first_round, max_attempts, cfg.stagnation_window,
                          cfg.improvement_margin, base_sid=base_sid,
                          base_code=self.codes.get(base_sid) if base_sid else None,
                          base_score=parent.solution.score if parent.solution else None,
                          best_score=self.best.score if self.best else None,
                          regions=self.regions.render(), region_context=self.regions.context(self.codes))

    def produce_attempt(self, state: CycleState, cycle: int | None, charge: bool) -> Attempt:
        """The cycle's next attempt: ask for code, extract it, measure it. Touches no shared state but
        the journal (and the spend, when `charge`), so a cycle's thread may run it."""
        r, mode = state.next_round, state.mode
        req = self.prompts.code_request(state, self.cfg.search.language)
        if charge:
            text = self._ask(req, cycle)
            usage: dict[str, Any] = {}
        else:
            value = self._ask_recorded(req, cycle)
            text, usage = value["text"], value.get("usage") or {}
        node = state.node
        try:
            sol = solution_from_text(self.task.name, text, author=self.model.name,
                                     name=f"{self.task.name}_r{r}_{node.node_id}",
                                     description=node.action.title if node.action else "")
        except CodeExtractionError as e:
            # Garbage from the model costs the round but nothing else; the reason goes to the next attempt.
            report = EvalReport("", "COMPILE_ERROR", self.device, log=str(e))
            return Attempt(state.k + 1, r, mode, report, bad_error=str(e), usage=usage)
        report = self._evaluate(sol, node.node_id, state.k + 1, r, cycle=cycle)
        return Attempt(state.k + 1, r, mode, report, sol.solution_id, sol.main_source, usage=usage)

    def apply_attempt(self, state: CycleState, a: Attempt) -> None:
        """The owner's part of an attempt: journal it, count it, and let it compete for the best."""
        if a.bad_error is not None:
            self.journal.event("bad_code", check={"round": a.round}, error=a.bad_error)
        else:
            assert a.solution_id is not None and a.code is not None
            self.codes[a.solution_id] = a.code
            self.evaluations += 1
            # by the owner, in cycle order: deterministic
            self.regions.observe(a.solution_id, a.report, state.node.node_id)
            self._consider_best(a.report, a.solution_id, state.node.node_id, a.round)
            self.memory.observe(self.wm, state.node, solution_id=a.solution_id, round_index=a.round, code=a.code,
                                report=a.report, region_scores=self.regions.region_scores(a.report),
                                notify=self.progress.message)
        self.wm.record_attempt(state.node.node_id)
        self.progress.attempt_done(a.round, a.report, self.best.score if self.best else None)

    def close_request_from_tree(self, state: CycleState, wm: WorldModel, best_score: float | None) -> CloseRequest:
        """Close the cycle on `wm` (attach its best kernel, or count its failure) and render the request
        that asks the model to refine the tree (after a success) or to mark the step harder."""
        cfg = self.cfg.search
        node = wm.node(state.node.node_id)
        context: dict[str, Any] = {"task": self.task.name, "node_id": node.node_id,
                                   "best_score": best_score, "parent_score": state.base_score,
                                   **state.region_context}
        if state.passed:
            assert state.best is not None
            code, report = state.best
            profile = read_profile(report.to_json())
            context.update(score=report.score, node_code=code, **profile.to_context())
            cal = calibration(wm)
            predicted = node.action.expected_speedup if node.action else None
            purpose, template = "after_success", "refine.j2"
            kw = dict(evidence=evidence(report), code=code, fence=fence(code), profile=render_profile(profile),
                      parent_score=fmt(state.base_score if state.base_score is not None else 1.0),
                      predicted=fmt(predicted), calibration=fmt(cal.factor) if cal.n else "")
        else:
            last = state.last
            code = self.codes.get(last.solution_id, "") if last else ""
            if last is not None and not code:
                code = next((a.code for a in state.attempts if a.solution_id == last.solution_id and a.code), "")
            ev = last.summary() if last else "no attempt"
            context.update(failure=ev)
            purpose, template = "after_failure", "too_hard.j2"
            kw = dict(evidence=ev, code=code, fence=fence(code), attempts=state.k,
                      failed_cycles=node.failed_cycles, max_failed_cycles=cfg.max_failed_cycles)
        # the tree as it stands after closing the node or counting its failure
        context["world_model"] = wm.to_json()
        common = dict(world_model=render_compact(wm), frontier=render_frontier(wm), node_id=node.node_id,
                      action_title=node.action.title if node.action else "", max_new_nodes=cfg.max_new_nodes)
        prompt = self.prompts.render(template, cfg.language, regions=state.regions, **common, **kw)
        return CloseRequest(purpose, prompt, context)

    def mark_closed(self, state: CycleState, wm: WorldModel) -> bool:
        """Attach the cycle's best kernel to its node (closed even when slower than its parent: multi-step
        plans may get slower before faster), or count a failed cycle. Returns whether the node retired."""
        node = state.node
        if state.passed:
            assert state.best is not None and state.best_sid is not None
            report = state.best[1]
            wm.attach_solution(node.node_id, AttachedSolution(
                state.best_sid, state.base_sid, state.first_round + max(state.k, 1) - 1, report.status,
                report.score, mean_latency(report)))
            return False
        return wm.record_failed_cycle(node.node_id, self.cfg.search.max_failed_cycles)

    def close_cycle(self, state: CycleState, request: CloseRequest | None) -> None:
        """The owner closes the cycle on the real tree: journal, then the refine / too-hard edit."""
        node = state.node
        retired = self.mark_closed(state, self.wm)
        if state.passed:
            assert state.best is not None
            self.journal.event("attach", check={"node_id": node.node_id, "solution_id": state.best_sid},
                               score=state.best[1].score, parent_score=state.base_score,
                               predicted=node.action.expected_speedup if node.action else None)
        else:
            self.journal.event("cycle_failed", check={"node_id": node.node_id}, retired=retired,
                               status=state.last.status if state.last else None)
        if request is None:                    # the serial loop renders it now, from the closed tree
            request = self.close_request_from_tree(state, self.wm, self.best.score if self.best else None)
        if request.text is None and self._budget_reason():
            self._snapshot()
            return
        self._edit(request.purpose, request.prompt, request.context, self.cfg.search.max_new_nodes,
                   node_id=node.node_id, first_text=request.text, cycle=state.cycle if request.text else None)
        self._snapshot()
