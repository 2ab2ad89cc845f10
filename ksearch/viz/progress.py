"""Live progress of a run: round, current action, last result, best score, elapsed time."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ksearch.eval.report import EvalReport
from ksearch.world_model import Node


class LiveProgress:
    """A one-panel live view on a terminal; plain lines when output is not a terminal."""

    def __init__(self, console: Console | None = None, live: bool = True):
        self.console = console or Console()
        self.t0 = time.monotonic()
        self.state: dict[str, Any] = {"round": "-", "action": "-", "last": "-", "best": None}
        self._live: Live | None = None
        if live and self.console.is_terminal:
            self._live = Live(self._render(), console=self.console, refresh_per_second=4, transient=True)
            self._live.start()

    def _render(self) -> Table:
        t = Table.grid(padding=(0, 2))
        elapsed = time.monotonic() - self.t0
        best = self.state["best"]
        t.add_row(Text("round", style="bold"), str(self.state["round"]),
                  Text("best", style="bold"), f"{best:.4g}x" if best is not None else "-",
                  Text("elapsed", style="bold"), f"{elapsed:5.0f}s")
        t.add_row(Text("action", style="bold"), Text(str(self.state["action"])[:90]), "", "", "", "")
        t.add_row(Text("last", style="bold"), Text(str(self.state["last"])[:90]), "", "", "", "")
        return t

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._render())

    def round_started(self, round_index: int, max_rounds: int, node: Node, attempt: int, mode: str,
                      short_id: str | None = None) -> None:
        """`short_id`: the node as `ksearch show` names it (what `show --node` and `fork.node=` take)."""
        title = node.action.title if node.action else node.step
        self.state["round"] = f"{round_index}/{max_rounds}"
        self.state["action"] = f"{short_id or node.node_id}: {title} (attempt {attempt}, {mode})"
        if self._live is None:
            self.console.print(f"[round {round_index}/{max_rounds}] {self.state['action']}", highlight=False,
                               markup=False)
        self._refresh()

    def attempt_done(self, round_index: int, report: EvalReport, best_score: float | None) -> None:
        self.state["last"] = report.summary()
        self.state["best"] = best_score
        if self._live is None:
            best = f"{best_score:.4g}x" if best_score is not None else "-"
            self.console.print(f"    -> {report.summary()[:160]}  | best {best} | "
                               f"{time.monotonic() - self.t0:.0f}s", highlight=False, markup=False)
        self._refresh()

    def message(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False)

    def stop(self, status: str = "finished") -> None:
        """Take the live panel down (status is for sinks that record it, see viz.tracking.Tee)."""
        if self._live is not None:
            self._live.stop()
            self._live = None
