"""Cycles side by side (`search.parallel=N`): up to N action cycles in flight, on different frontier nodes.

One owner (the thread that runs the search) holds the world model, the incumbent and the journal's
ordered events. It starts cycles (select, journaled with the cycle id), and a thread per cycle does the
cycle's own work: code requests, evaluations (through the evaluation pool) and the close-of-cycle edit
request, rendered from a copy of the tree as it was when the cycle started plus the cycle's own result.
That work is journaled by cycle (store/journal.py), so it is found again on resume whatever the
interleaving was.

The owner applies finished cycles strictly in cycle-id order (it waits for the oldest cycle in flight),
then fills the free slots. So everything the owner does - which node each cycle gets, the order of tree
edits, bests and budget decisions - depends on N and on the answers only, never on timing: replay
re-enacts it exactly, and a resumed run may change N (each settings segment replays with its own N).

Budgets: a cycle reserves up to max_rounds_per_cycle rounds when it starts (near the end of the budget, a
fair share of what is left: ceil(free / N)) and gives back what it did not use when applied, so
search.max_rounds is never overrun (round labels of unused reservations are skipped); the model budget is checked by the owner before
a cycle starts, so requests of cycles already in flight may pass llm.max_requests by up to N cycles'
worth (their spend is counted when they are applied).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable

from ksearch.eval.parent.pool import serialize_ast_parse
from ksearch.llm.base import ModelRequest
from ksearch.planner.cycle import CycleState
from ksearch.world_model import WorldModel

if TYPE_CHECKING:
    from ksearch.planner.search import CloseRequest, Search

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
        except BaseException as e:          # handed to the owner, which re-raises it in cycle order
            future.set_exception(e)

    threading.Thread(target=target, name=name, daemon=True).start()
    return future


class ParallelLoop:
    def __init__(self, search: "Search"):
        serialize_ast_parse()
        self.s = search
        self.in_flight: dict[int, tuple[CycleState, Future]] = {}     # insertion order = cycle order
        self.reserved = 0

    def _free_rounds(self) -> int:
        return max(0, self.s.cfg.search.max_rounds - self.s.rounds_used - self.reserved)

    def _stop_reason(self) -> str | None:
        if self._free_rounds() <= 0:
            return "round budget used"
        return self.s._budget_reason()

    def run(self) -> str | None:
        """Runs until a stop reason (returned) or until settings go back to one cycle at a time (None)."""
        s = self.s
        try:
            while True:
                stop = self._fill()
                if not self.in_flight:
                    if s.cfg.search.parallel <= 1 and stop is None:
                        return None
                    return stop or s.no_action_reason()
                cycle = next(iter(self.in_flight))
                state, future = self.in_flight.pop(cycle)
                close = future.result()            # the cycle's own errors surface here, in cycle order
                self.reserved -= state.max_attempts
                self._apply(state, close)
        finally:
            for _, future in self.in_flight.values():
                future.cancel()

    def _fill(self) -> str | None:
        s = self.s
        while len(self.in_flight) < min(s.cfg.search.parallel, MAX_THREADS):
            reason = self._stop_reason()
            if reason:
                return reason
            busy = frozenset(st.node.node_id for st, _ in self.in_flight.values())
            s.maintain(busy)
            node = s.select(busy)
            if node is None:
                return s.no_action_reason()
            # Near the end of the round budget the rounds left are shared among the slots, so the last
            # cycles run side by side instead of one long cycle taking them all.
            slots = min(s.cfg.search.parallel, MAX_THREADS)
            cap = min(s.cfg.search.max_rounds_per_cycle, max(1, -(-self._free_rounds() // slots)))
            state = s.start_cycle(node, s.round, cap)
            s.round += cap                          # round labels reserved for this cycle
            self.reserved += cap
            tree = s.wm.to_json()
            self.in_flight[state.cycle] = (state, _in_thread(f"ksearch-cycle-{state.cycle}", self._work, state, tree))
        return None

    def _work(self, state: CycleState, tree: dict[str, Any]) -> "CloseRequest":
        """The cycle's thread: attempts, then the close request on a copy of the tree."""
        s = self.s
        while state.k < state.max_attempts:
            state.record(s.produce_attempt(state, cycle=state.cycle, charge=False))
            if state.stagnated():
                break
        view = WorldModel.from_json(tree)
        for _ in range(state.k):
            view.record_attempt(state.node.node_id)
        s.mark_closed(state, view)
        own = state.best[1].score if state.best else None
        best = max((x for x in (state.best_score, own) if x is not None), default=None)
        close = s.close_request_from_tree(state, view, best)
        value = s._ask_recorded(ModelRequest("edit", close.purpose, close.prompt, close.context, []), state.cycle)
        close.text, close.usage = value["text"], value.get("usage") or {}
        return close

    def _apply(self, state: CycleState, close: "CloseRequest") -> None:
        """The owner applies a finished cycle: its attempts in order, then its close and edit."""
        s = self.s
        node = state.node
        for a in state.attempts:
            s.progress.round_started(a.round, s.cfg.search.max_rounds, node, a.attempt, a.mode,
                                     s.short_id(node.node_id))
            s.spend.add(a.usage)
            s.apply_attempt(state, a)
        s.spend.add(close.usage)
        s.rounds_used += max(1, state.k)
        s.close_cycle(state, close)
