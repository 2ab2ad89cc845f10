"""The search: world model -> selection -> action cycle -> evaluation -> world-model update.

Follows K-Search's action cycles (reference/k-search-algorithm.md section 2) with its weak points fixed:
per-node failure counts that retire hopeless actions, a hard cap on rounds per cycle, the seed kernel
eligible as the returned best, a difficulty cap that is never raised, a noise-aware comparison of
measurements (planner/incumbent.py), and a deterministic fallback when the model cannot produce a valid
edit.

This module wires the pieces and runs the run's segments: the setup (run start, baseline, initial world
model, fork or seed), the loop of cycles (planner/loop.py, for any search.parallel), the shape dispatch
that ends a segment (planner/regions.py) and the run's end. Every model answer, measurement and decision
goes through the journal (planner/recorder.py) and into the run state (store/state.py), so a killed run
resumes exactly where it stopped, and settings may change between segments of a run (planner/settings.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ksearch.config import Config, to_plain
from ksearch.eval.report import EvalReport
from ksearch.instantiate import Solution
from ksearch.instantiate.dispatch import current_generators
from ksearch.interop.flashinfer_bench import solution_from_user_text
from ksearch.knowledge.recall import render_recall
from ksearch.planner.budget import BudgetSpent
from ksearch.planner.context import Context
from ksearch.planner.editing import Editor
from ksearch.planner.incumbent import Incumbent
from ksearch.planner.loop import Loop
from ksearch.planner.prompts import Prompts, mean_latency
from ksearch.planner.recorder import EvaluatorLike, NullProgress, Progress, Recorder, Services, Target
from ksearch.planner.regions import DispatchStep, RegionBoard, finish_with_dispatch
from ksearch.planner.settings import Segments, frozen_changes, settings_diff
from ksearch.planner.steps import CycleSteps
from ksearch.planner.validation import Validation
from ksearch.store import Journal, RunDir
from ksearch.store import records as R
from ksearch.store.fork import ForkSeed, MeasuredOn, seed_record
from ksearch.store.state import Best, RunState, Spend
from ksearch.world_model import AttachedSolution, WorldModel
from ksearch.world_model.tree import ROOT_ID

__all__ = ["Search", "SearchOutcome", "Target", "Services", "Best", "Spend", "settings_diff", "frozen_changes",
           "EvaluatorLike", "Progress", "NullProgress"]


@dataclass
class SearchOutcome:
    run_dir: Path
    stop_reason: str
    rounds_used: int
    state: RunState
    device: str

    @property
    def evaluations(self) -> int:
        return self.state.evaluation_count

    @property
    def best(self) -> Best | None:
        return self.state.best

    @property
    def spend(self) -> Spend:
        return self.state.spend

    @property
    def world_model(self) -> WorldModel:
        return self.state.tree

    @property
    def baseline_label(self) -> str:
        return self.state.baseline.label if self.state.baseline else ""


class Search:
    def __init__(self, cfg: Config, target: Target, services: Services, run: RunDir, journal: Journal,
                 fork: ForkSeed | None = None):
        self.target, self.run_dir, self.journal, self.fork = target, run, journal, fork
        self._generators_given = services.generators
        self.progress = services.progress
        # the best kernel per region of the shape space, fed by every evaluation of a node's step
        self.board = RegionBoard(target.task, target.workloads)
        self.state = RunState(self.board)
        self.segments = Segments(cfg, run.path, self._record_change, self.progress.message)
        self.recorder = Recorder(journal, self.state, run, services, target)
        self.prompts = Prompts(target.task, target.device)
        self.ctx = Context(self.segments, self.state, self.recorder, self.prompts, self.progress, target)
        # held-out confirmation of every new best
        self.validation = Validation.for_search(cfg, target, self.recorder, self.progress.message)
        self.incumbent = Incumbent(self.recorder, self.validation, self.segments)
        self.editor = Editor(self.ctx)
        self.steps = CycleSteps(self.ctx, self.editor, self.incumbent, self.board)
        journal.on_info = self._replayed_info
        journal.on_live = self.segments.went_live

    @property
    def cfg(self) -> Config:
        """The settings in effect (a replayed segment's, until the live edge)."""
        return self.segments.cfg

    # ---- settings segments --------------------------------------------------------------------------
    def _replayed_info(self, rec: R.Record) -> None:
        self.state.apply(rec)
        if isinstance(rec, R.ConfigChange):
            self.segments.replayed(rec.config)

    def _record_change(self, config: dict[str, Any], diff: dict[str, Any]) -> None:
        self.recorder.write(R.ConfigChange(config=config, changed=diff))

    def _evaluate(self, solution: Solution, node_id: str, attempt: int, round_index: int) -> EvalReport:
        """The owner measures a kernel (the seed, a fork's kernels, a dispatch): recorded and counted."""
        rec = self.recorder.evaluate(solution, node_id, attempt, round_index)
        self.state.apply(rec)
        return rec.report

    def _generator(self, name: str) -> int:
        """The version of a code generator this run started with (1: recorded before generators had one).
        Asked after set-up, which has written (or replayed) the run's start."""
        assert self.state.start is not None
        return (self.state.start.generators or {}).get(name, 1)

    # ---- set-up ---------------------------------------------------------------------------------------
    def _setup(self) -> None:
        first = self.journal.recorded[0] if self.journal.recorded else None
        if isinstance(first, R.RunStart) and first.config:
            self.segments.replay_first(first.config)   # replay the first segment as it ran
        t = self.target
        if isinstance(first, R.RunStart):
            generators = first.generators           # None: recorded before generators had versions
        else:
            given = self._generators_given
            generators = dict(given) if given is not None else current_generators()
        start = self.recorder.write(R.RunStart(task=t.task.name, workload_set=t.workload_set, device=t.device,
                                               workloads=[w.to_json() for w in t.workloads],
                                               model=self.recorder.model.name, config=to_plain(self.cfg),
                                               generators=generators))
        if self.journal.dropped_bytes:
            self.progress.message(f"the journal's last line was torn ({self.journal.dropped_bytes} bytes, a crash "
                                  f"while writing) and was dropped; that step is redone")
        key = f"{t.device}:{t.workload_set}:{self.cfg.run.seed}"
        self.prompts.baseline = self.recorder.baseline(key, t.workloads)
        self.progress.message(f"baseline: {self.prompts.baseline.described()}")
        memory = self.recorder.memory
        first_start = first if isinstance(first, R.RunStart) else start     # the run's name on every resume
        memory.begin(first_start, self.run_dir.path, t.device, t.workload_set, self.prompts.baseline.env)
        if self.fork is not None:
            self._start_from_fork(self.fork)
        else:
            recalled = memory.recall(self.journal, self.progress.message)     # journaled: a resume replays it
            prompt = self.prompts.render("init.j2", self.cfg.search.language, min_families=2, max_new_nodes=8,
                                         memory=render_recall(recalled))
            # the device: the offline model proposes no family the device cannot run (CUDA on the CPU)
            res = self.editor.edit("init", prompt, {"task": t.task.name, "device": t.device, **recalled.context()},
                                   max_new_nodes=8)
            if not res.ok:
                raise RuntimeError(f"the model could not build an initial world model: {res.errors}")
        if self.cfg.search.seed_solution:
            self._seed(Path(self.cfg.search.seed_solution))
        self.editor.snapshot()

    def _start_from_fork(self, seed: ForkSeed) -> None:
        """The path root..node of another run, with its kernels; measurements carried over only when the
        task, workload set and device match, else the path's kernels are measured again here."""
        t = self.target
        comparable = seed.measured_on == MeasuredOn(t.task.name, t.workload_set, t.device)
        # the record makes the seed's tree the run's, and carries its measurements over when comparable
        self.recorder.write(R.Fork(source=seed.source, node=seed.node_id, seed=seed_record(seed),
                                   measurements="carried over" if comparable else "re-measured"))
        for sol in seed.solutions:
            self.recorder.save(sol)
        tree = self.state.tree
        for node in tree.path(seed.node_id):
            if node.solution is None:
                continue
            sid = node.solution.solution_id
            if comparable and sid in seed.reports:
                report = EvalReport.from_json(seed.reports[sid])
            else:
                report = self._evaluate(self.run_dir.load_solution(sid), node.node_id, 0, 0)
                old = node.solution
                tree.attach_solution(node.node_id, AttachedSolution(
                    sid, old.parent_solution_id, 0, report.status, report.score, mean_latency(report)))
            self.incumbent.consider(report, sid, node.node_id, 0)
        self.progress.message(f"forked from {seed.source} at node {seed.node_id} "
                              f"({'measurements carried over' if comparable else 'kernels re-measured'})")

    def _seed(self, path: Path) -> None:
        if not path.is_file():
            raise FileNotFoundError(f"search.seed_solution={path} does not exist")
        sol = solution_from_user_text(self.target.task.name, path.read_text(), name=f"seed:{path.name}", author="user",
                                 description="")
        report = self._evaluate(sol, ROOT_ID, 0, 0)
        self.state.tree.attach_solution(ROOT_ID, AttachedSolution(sol.solution_id, None, 0, report.status,
                                                                  report.score, mean_latency(report)))
        self.incumbent.consider(report, sol.solution_id, ROOT_ID, 0)
        if report.passed:
            self.progress.message(f"seed solution {path}: {report.summary()}; attached to the root, the search "
                                  f"keeps it as the best until a kernel beats it")
        else:
            self.progress.message(f"warning: seed solution {path} did not pass and is not used (the search "
                                  f"starts from the catalog's families): {report.summary()}")

    # ---- the run --------------------------------------------------------------------------------------
    def run(self) -> SearchOutcome:
        self._setup()
        state = self.state
        while True:
            try:
                stop = Loop(self.ctx, self.steps).run()
            except BudgetSpent as e:
                stop = str(e)
            epoch_at_stop = self.segments.epoch
            if self.validation.enabled:          # one solution dispatching among the per-region bests
                step = DispatchStep(self.target.task, self.board, self.recorder.source, self._evaluate,
                                    self.recorder.write, self.incumbent)
                finish_with_dispatch(step, max(state.rounds.next - 1, 0), self._generator("dispatch"))
            self.recorder.write(R.RunEnd(stop=stop, evaluations=state.evaluation_count,
                                         best=state.best.to_json() if state.best else None,
                                         spend=state.spend.to_json()))
            self.editor.snapshot()
            if not self.journal.replaying:
                self.journal.go_live()
            if self.segments.epoch == epoch_at_stop:
                break
            self.progress.message("continuing under the new settings")
        rounds_used = min(state.rounds.used, self.cfg.search.max_rounds)
        return SearchOutcome(self.run_dir.path, stop, rounds_used, state, self.target.device)
