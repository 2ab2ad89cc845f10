"""The search loop, for any `search.parallel`: start cycles, let them work, apply them in cycle order.

One owner (the thread that runs the search) holds the run state and the journal's ordered records. It
keeps the frontier stocked, selects a node (a `select` record with the cycle id) and starts a cycle on it.

With `search.parallel=1` a cycle works in the owner's thread and each attempt is applied as it is made,
K-Search's way: the next code request already knows whether the last one became the best. With N > 1, up
to N cycles are in flight on different frontier nodes: a thread per cycle does the cycle's own work (code
requests, evaluations through the evaluation pool, and the close-of-cycle edit request, rendered from a
copy of the tree as it was when the cycle started plus the cycle's own result), journaled by cycle
(store/journal.py), so it is found again on resume whatever the interleaving was. The owner applies
finished cycles strictly in cycle-id order (it waits for the oldest cycle in flight), then fills the free
slots. Everything the owner does - which node each cycle gets, the order of tree edits, bests and budget
decisions - depends on N and on the answers only, never on timing: replay re-enacts it exactly, and a
resumed run may change N (each settings segment replays with its own N; once cycles run side by side
they keep doing so until the loop stops, even at N=1).

Budgets: the round budget is the run state's (`Rounds`): one cycle at a time, a cycle may make another
attempt while its rounds fit; side by side, a cycle reserves up to max_rounds_per_cycle rounds when it
starts (near the end of the budget, a fair share of what is left) and gives back what it did not use when
applied, so search.max_rounds is never overrun. The model budget is checked by the owner before a cycle
starts (and, one at a time, before each attempt), so requests of cycles already in flight may pass
llm.max_requests by up to N cycles' worth (their spend is counted when they are applied).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ksearch.eval.parent.pool import serialize_ast_parse
from ksearch.llm.base import ModelRequest
from ksearch.planner.context import Context
from ksearch.planner.cycle import CycleState
from ksearch.planner.steps import CloseRequest, CycleSteps
from ksearch.world_model import WorldModel

#: Threads for cycles in flight; search.parallel is capped by it.
MAX_THREADS = 256


def _in_thread(name: str, fn: Callable[..., Any], *args: Any) -> Future:
    """Run fn(*args) in a daemon thread: a run that stops on an error does not wait at exit for requests
    still in flight in other cycles (what they recorded stays; the rest is redone on resume)."""
    future: Future = Future()

    def target() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn(*args))
        except BaseException as e:  # noqa: BLE001 - handed to the owner, which re-raises it in cycle order
            future.set_exception(e)

    threading.Thread(target=target, name=name, daemon=True).start()
    return future


class Loop:
    def __init__(self, ctx: Context, steps: CycleSteps):
        self.ctx, self.steps = ctx, steps
        self.in_flight: dict[int, tuple[CycleState, Future]] = {}     # insertion order = cycle order

    def _slots(self) -> int:
        return min(self.ctx.cfg.search.parallel, MAX_THREADS)

    def run(self) -> str:
        """Cycles until a stop reason (returned): the round budget, the model budget, nothing left to try."""
        side_by_side = False
        try:
            while True:
                if not side_by_side and self._slots() <= 1:
                    stop = self._one_cycle()
                    if stop is not None:
                        return stop
                    continue
                if not side_by_side:
                    serialize_ast_parse()
                    side_by_side = True
                stop = self._fill()
                if not self.in_flight:
                    return stop or self.steps.no_action_reason()
                state, future = self.in_flight.pop(next(iter(self.in_flight)))
                close = future.result()            # the cycle's own errors surface here, in cycle order
                self.ctx.state.rounds.release(state.max_attempts)
                self._apply(state, close)
        finally:
            for _, future in self.in_flight.values():
                future.cancel()

    def _stop_reason(self, side_by_side: bool) -> str | None:
        cfg = self.ctx.cfg.search
        return self.ctx.state.rounds.stop_reason(cfg.max_rounds, side_by_side) or self.ctx.budget_reason()

    # ---- one cycle at a time ----------------------------------------------------------------------------
    def _one_cycle(self) -> str | None:
        """One cycle, the way K-Search runs them: select, attempts applied as they are made, close."""
        ctx, steps, rounds = self.ctx, self.steps, self.ctx.state.rounds
        reason = self._stop_reason(side_by_side=False)
        if reason:
            return reason
        steps.maintain()
        node = steps.select()
        if node is None:
            return steps.no_action_reason()
        state = steps.start_cycle(node, rounds.next, ctx.cfg.search.max_rounds_per_cycle)
        while rounds.fits(state.k, ctx.cfg.search.max_rounds_per_cycle, ctx.cfg.search.max_rounds):
            if ctx.budget_reason():
                break
            ctx.progress.round_started(state.next_round, ctx.cfg.search.max_rounds, node, state.k + 1, state.mode,
                                       ctx.short_id(node.node_id))
            attempt = steps.produce_attempt(state)
            steps.apply_attempt(state, attempt)
            state.record(attempt)
            if state.stagnated():
                break
        steps.close_cycle(state, None)
        rounds.advance(state.k)
        return None

    # ---- cycles side by side ----------------------------------------------------------------------------
    def _fill(self) -> str | None:
        ctx, steps, rounds = self.ctx, self.steps, self.ctx.state.rounds
        while len(self.in_flight) < self._slots():
            reason = self._stop_reason(side_by_side=True)
            if reason:
                return reason
            busy = frozenset(st.node.node_id for st, _ in self.in_flight.values())
            steps.maintain(busy)
            node = steps.select(busy)
            if node is None:
                return steps.no_action_reason()
            # Near the end of the round budget the rounds left are shared among the slots, so the last
            # cycles run side by side instead of one long cycle taking them all.
            cap = rounds.share(ctx.cfg.search.max_rounds_per_cycle, ctx.cfg.search.max_rounds, self._slots())
            state = steps.start_cycle(node, rounds.next, cap)
            rounds.reserve(cap)                     # round labels reserved for this cycle
            tree = ctx.state.tree.to_json()
            self.in_flight[state.cycle] = (state, _in_thread(f"ksearch-cycle-{state.cycle}", self._work, state, tree))
        return None

    def _work(self, state: CycleState, tree: dict[str, Any]) -> CloseRequest:
        """The cycle's thread: attempts, then the close request on a copy of the tree."""
        steps = self.steps
        while state.k < state.max_attempts:
            state.record(steps.produce_attempt(state))
            if state.stagnated():
                break
        view = WorldModel.from_json(tree)
        for _ in range(state.k):
            view.record_attempt(state.node.node_id)
        steps.mark_closed(state, view)
        own = state.best[1].score if state.best else None
        best = max((x for x in (state.start.outlook.best_score, own) if x is not None), default=None)
        close = steps.close_request(state, view, best)
        close.answer = self.ctx.recorder.ask(ModelRequest("edit", close.purpose, close.prompt, close.context, []),
                                             state.cycle)
        return close

    def _apply(self, state: CycleState, close: CloseRequest) -> None:
        """The owner applies a finished cycle: its attempts in order, then its close and edit."""
        ctx, node = self.ctx, state.node
        for a in state.attempts:
            ctx.progress.round_started(a.round, ctx.cfg.search.max_rounds, node, a.number, a.mode,
                                       ctx.short_id(node.node_id))
            self.steps.apply_attempt(state, a)
        if close.answer is not None:
            ctx.state.apply(close.answer)          # what the close request cost
        self.steps.close_cycle(state, close)
