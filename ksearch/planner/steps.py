"""The steps of an action cycle, as the loop (planner/loop.py) runs them: keep the frontier stocked, select a
node, start the cycle, produce attempts (code request, extraction, measurement), apply them, close the cycle.

`produce_attempt`, `mark_closed` and `close_request` touch no shared state but the journal, so a cycle's
thread may run them (on its own copy of the tree); everything else is the owner's, in cycle order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ksearch.eval.report import EvalReport, Status
from ksearch.instantiate import CodeExtractionError, solution_from_text
from ksearch.planner.context import Context
from ksearch.planner.cycle import Attempt, Base, CycleStart, CycleState, Outlook, Rules
from ksearch.planner.editing import Editor
from ksearch.planner.incumbent import Incumbent
from ksearch.planner.prompts import evidence, fence, fmt, mean_latency
from ksearch.planner.regions import RegionBoard
from ksearch.planner.selection import calibration, choose_next, explain
from ksearch.profile import read_profile, render_profile
from ksearch.store import records as R
from ksearch.world_model import AttachedSolution, Node, WorldModel, render_compact, render_frontier


@dataclass
class CloseRequest:
    """The close-of-cycle edit request: its pieces, so the owner can re-ask with reasons."""

    purpose: str
    prompt: str
    context: dict[str, Any]
    answer: R.ModelCall | None = None      # the first answer, when the cycle's thread asked it


class CycleSteps:
    def __init__(self, ctx: Context, editor: Editor, incumbent: Incumbent, board: RegionBoard):
        self.ctx, self.editor, self.incumbent, self.board = ctx, editor, incumbent, board

    # ---- the owner's steps before a cycle ---------------------------------------------------------------
    def maintain(self, busy: frozenset[str] = frozenset()) -> None:
        """Ask for new actions when the frontier (less nodes in flight) is empty or the best kernel has no
        open follow-up."""
        ctx, wm = self.ctx, self.ctx.state.tree
        cfg = ctx.cfg.search
        frontier = [n for n in wm.frontier() if n.action and n.action.difficulty <= cfg.max_difficulty
                    and n.node_id not in busy]
        best_node = self._fork_anchor() or wm.best_closed()
        best_has_child = best_node is None or any(c.is_open_action for c in wm.children(best_node.node_id))
        if frontier and best_has_child:
            return
        best = ctx.state.best
        context = {"task": ctx.target.task.name, "world_model": wm.to_json(),
                   "best_node_id": best_node.node_id if best_node else None,
                   "best_code": ctx.recorder.source(best_node.solution.solution_id)
                   if best_node and best_node.solution else None,
                   "best_score": best.score if best else None, **self.board.context(ctx.recorder.source)}
        prompt = ctx.prompts.render("propose.j2", cfg.language, regions=self.board.render(),
                                    world_model=render_compact(wm), frontier=render_frontier(wm),
                                    max_new_nodes=cfg.max_new_nodes, best_node_id=context["best_node_id"],
                                    best_score=fmt(context["best_score"]))
        if self.editor.edit("propose", prompt, context, cfg.max_new_nodes, node_id=context["best_node_id"]).ok:
            self.editor.snapshot()

    def _fork_anchor(self) -> Node | None:
        """A fork grows from its node (fork.node=X expands X), until X has children of its own."""
        fork, wm = self.ctx.state.fork, self.ctx.state.tree
        if fork is None or fork.node not in wm:
            return None
        node = wm.node(fork.node)
        return node if node.is_closed and not wm.children(node.node_id) else None

    def select(self, busy: frozenset[str] = frozenset()) -> Node | None:
        """The next frontier node (never one a cycle in flight works on); its selection is recorded."""
        ctx, wm = self.ctx, self.ctx.state.tree
        cfg = ctx.cfg.search
        cycle = ctx.state.cycles + 1
        node = choose_next(wm, cfg.max_difficulty, cfg.explore_weight, policy=cfg.policy, exclude=busy,
                           seed=ctx.cfg.run.seed, draw=cycle)
        if node is None:
            return None
        why = explain(wm, node, policy=cfg.policy, explore_weight=cfg.explore_weight)
        ctx.recorder.write(R.Select(node_id=node.node_id, round=ctx.state.rounds.next,
                                    title=node.action.title if node.action else "", policy=cfg.policy, why=why,
                                    cycle=cycle))
        return node

    def no_action_reason(self) -> str:
        return (f"no executable action at difficulty <= {self.ctx.cfg.search.max_difficulty} "
                f"(the world model has nothing left to try)")

    def start_cycle(self, node: Node, first_round: int, max_attempts: int) -> CycleState:
        state = self.ctx.state
        parent = state.tree.base_of(node.node_id)     # through split steps to the kernel this builds on
        sid = parent.solution.solution_id if parent.solution else None
        cfg = self.ctx.cfg.search
        base = Base(sid, self.ctx.recorder.source(sid), parent.solution.score if parent.solution else None)
        outlook = Outlook(state.best.score if state.best else None, self.board.render(),
                          self.board.context(self.ctx.recorder.source))
        return CycleState(CycleStart(state.cycles, node, first_round, max_attempts, base, outlook),
                          Rules(cfg.stagnation_window, cfg.improvement_margin))

    # ---- a cycle's own work (any thread) ---------------------------------------------------------------
    def produce_attempt(self, cs: CycleState) -> Attempt:
        """The cycle's next attempt: ask for code, extract it, measure it. Its records are applied by the
        owner with the attempt (`apply_attempt`)."""
        ctx = self.ctx
        r, mode, number = cs.next_round, cs.mode, cs.k + 1
        reply = ctx.recorder.ask(ctx.prompts.code_request(cs, ctx.cfg.search.language), cs.cycle)
        node, task = cs.node, ctx.target.task
        try:
            sol = solution_from_text(task.name, reply.text, author=ctx.recorder.model.name,
                                     name=f"{task.name}_r{r}_{node.node_id}",
                                     description=node.action.title if node.action else "")
        except CodeExtractionError as e:
            # Garbage from the model costs the round but nothing else; the reason goes to the next attempt.
            return Attempt(number, r, mode, EvalReport("", Status.COMPILE_ERROR, ctx.target.device, log=str(e)), (reply,))
        evaluation = ctx.recorder.evaluate(sol, node.node_id, number, r, cycle=cs.cycle)
        return Attempt(number, r, mode, evaluation.report, (reply, evaluation), sol.main_source)

    def mark_closed(self, cs: CycleState, wm: WorldModel) -> bool:
        """Attach the cycle's best kernel to its node (closed even when slower than its parent: multi-step
        plans may get slower before faster), or count a failed cycle. Returns whether the node retired."""
        node = cs.node
        if cs.passed:
            assert cs.best is not None and cs.best_sid is not None
            report = cs.best[1]
            wm.attach_solution(node.node_id, AttachedSolution(
                cs.best_sid, cs.base.solution_id, cs.first_round + max(cs.k, 1) - 1, report.status,
                report.score, mean_latency(report)))
            return False
        return wm.record_failed_cycle(node.node_id, self.ctx.cfg.search.max_failed_cycles)

    def close_request(self, cs: CycleState, wm: WorldModel, best_score: float | None) -> CloseRequest:
        """The request that asks the model to refine the tree (after a success) or to mark the step harder,
        rendered from `wm` with the cycle closed on it."""
        ctx = self.ctx
        cfg = ctx.cfg.search
        node = wm.node(cs.node.node_id)
        context: dict[str, Any] = {"task": ctx.target.task.name, "node_id": node.node_id,
                                   "best_score": best_score, "parent_score": cs.base.score,
                                   **cs.start.outlook.region_context}
        if cs.passed:
            assert cs.best is not None
            code, report = cs.best
            # what the hardware said about it; a kernel without a profile (every CPU run, and runs recorded
            # before profiles) asks what it always asked, so their resumes replay
            profile = read_profile(report.to_json())
            context.update(score=report.score, node_code=code,
                           **(profile.to_context() if profile.profile is not None else {}))
            cal = calibration(wm)
            predicted = node.action.expected_speedup if node.action else None
            purpose, template = "after_success", "refine.j2"
            kw = dict(evidence=evidence(report), code=code, fence=fence(code),
                      profile=render_profile(profile) if profile.profile is not None else "",
                      parent_score=fmt(cs.base.score if cs.base.score is not None else 1.0),
                      predicted=fmt(predicted), calibration=fmt(cal.factor) if cal.n else "")
        else:
            last = cs.last
            code = (ctx.recorder.source(last.solution_id) if last else None) or ""
            if last is not None and not code:
                code = next((a.code for a in cs.attempts if a.solution_id == last.solution_id and a.code), "")
            ev = last.summary() if last else "no attempt"
            context.update(failure=ev)
            purpose, template = "after_failure", "too_hard.j2"
            kw = dict(evidence=ev, code=code, fence=fence(code), attempts=str(cs.k),
                      failed_cycles=str(node.failed_cycles), max_failed_cycles=str(cfg.max_failed_cycles))
        # the tree as it stands after closing the node or counting its failure
        context["world_model"] = wm.to_json()
        common = dict(world_model=render_compact(wm), frontier=render_frontier(wm), node_id=node.node_id,
                      action_title=node.action.title if node.action else "", max_new_nodes=cfg.max_new_nodes)
        prompt = ctx.prompts.render(template, cfg.language, regions=cs.start.outlook.regions, **common, **kw)
        return CloseRequest(purpose, prompt, context)

    # ---- the owner applies a cycle ---------------------------------------------------------------------
    def apply_attempt(self, cs: CycleState, a: Attempt) -> None:
        """The owner's part of an attempt: its records into the run state (its reply's cost, its evaluation
        counted), then a record of a reply without code, or the kernel's bid for the best."""
        state = self.ctx.state
        for rec in a.records:
            state.apply(rec)
        if a.code is None:
            self.ctx.recorder.write(R.BadCode(round=a.round, error=a.report.log))
        else:
            assert a.solution_id is not None
            self.incumbent.consider(a.report, a.solution_id, cs.node.node_id, a.round)
            self.ctx.recorder.memory.observe(state.tree, cs.node, solution_id=a.solution_id, round_index=a.round,
                                             code=a.code, report=a.report,
                                             region_scores=self.board.region_scores(a.report),
                                             notify=self.ctx.progress.message)
        state.tree.record_attempt(cs.node.node_id)
        self.ctx.progress.attempt_done(a.round, a.report, state.best.score if state.best else None)

    def close_cycle(self, cs: CycleState, request: CloseRequest | None) -> None:
        """The owner closes the cycle on the real tree: its record, then the refine / too-hard edit."""
        ctx, node = self.ctx, cs.node
        retired = self.mark_closed(cs, ctx.state.tree)
        if cs.passed:
            assert cs.best is not None
            ctx.recorder.write(R.Attach(node_id=node.node_id, solution_id=cs.best_sid, score=cs.best[1].score,
                                        parent_score=cs.base.score,
                                        predicted=node.action.expected_speedup if node.action else None))
        else:
            ctx.recorder.write(R.CycleFailed(node_id=node.node_id, retired=retired,
                                             status=cs.last.status if cs.last else None))
        if request is None:                    # one cycle at a time: rendered now, from the closed tree
            best = ctx.state.best
            request = self.close_request(cs, ctx.state.tree, best.score if best else None)
        if request.answer is None and ctx.budget_reason():
            self.editor.snapshot()
            return
        self.editor.edit(request.purpose, request.prompt, request.context, ctx.cfg.search.max_new_nodes,
                         node_id=node.node_id, first=request.answer)
        self.editor.snapshot()
