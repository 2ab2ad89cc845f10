"""One reader for a run directory, shared by `ksearch show`, `report`, `compare`, export and sweeps.

The journal is the source of truth (DESIGN.md: state can be rebuilt from it alone). Its records are
decoded once (store/records.py) and folded into the run state by the same code the search applies them
with (store/state.py), so the views agree with each other and with the search. The reader survives a
journal that is still being written (a torn last line), record kinds it does not know yet (kept in
`records`, otherwise ignored), and fields that a newer or older version of ksearch adds or lacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

import ksearch.store.records as R
from ksearch.eval.report import BaselineTimes, EvalReport
from ksearch.store.journal import read_records
from ksearch.store.lock import WriterState, probe
from ksearch.store.records import report_from_json
from ksearch.store.state import ModelUsage, RunState, fold

__all__ = ["RunHistory", "NotARunError", "load_history", "is_run_dir", "report_from_json", "ModelUsage"]

K = TypeVar("K", bound=R.Record)

#: Record kinds this reader interprets; any other kind is kept in `RunHistory.records` untouched.
KNOWN_KINDS = tuple(R.TYPES)


class NotARunError(FileNotFoundError):
    """The path holds no run; the message says what it is instead and what to pass."""


@dataclass
class RunHistory:
    """Everything a view needs about one run, read once from its directory: its records, and the run
    state they fold into (store/state.py, the same fold the search applies as it runs)."""

    run_dir: Path
    config: dict[str, Any]
    records: list[R.Record]
    run_state: RunState
    torn_tail: bool = False                     # the journal ends in a partial line (being written, or killed)
    writer: WriterState = WriterState(False, None)   # a live writer holds the run's lock; else the last one

    def of(self, kind: type[K]) -> list[K]:
        """The records of one kind, in journal order."""
        return [r for r in self.records if type(r) is kind]

    @property
    def live(self) -> bool:
        """A process is writing this run now (it holds the run's lock)."""
        return self.writer.live

    @property
    def state(self) -> str:
        """"running", "finished" (a run_end is the last step) or "stopped" (it died or was killed mid-run)."""
        if self.live:
            return "running"
        return "finished" if self.ended else "stopped"

    # ---- identity ---------------------------------------------------------------------------------
    @property
    def run_start(self) -> R.RunStart:
        return self.run_state.start or R.RunStart()

    @property
    def task(self) -> str:
        return self.run_start.task or _get(self.config, "task.name") or "?"

    @property
    def device(self) -> str:
        return self.run_start.device or "?"

    @property
    def workload_set(self) -> str:
        return self.run_start.workload_set or "?"

    @property
    def model(self) -> str:
        """The model that answered: run_start's name (e.g. openai/gpt-5.2), else the config's llm."""
        if self.run_start.model:
            return self.run_start.model
        return str(_get(self.config, "llm.model") or _get(self.config, "llm.kind") or "?")

    @property
    def policy(self) -> str:
        return str(_get(self.config, "search.policy") or "?")

    @property
    def seed(self) -> Any:
        return _get(self.config, "run.seed")

    @property
    def stop_reason(self) -> str | None:
        """None while the run has no run_end record (or a resume went on after it)."""
        return self.run_state.stop

    @property
    def ended(self) -> bool:
        return self.stop_reason is not None

    @property
    def ended_at(self) -> float | None:
        return self.run_state.ended_at

    @property
    def unknown_kinds(self) -> list[str]:
        return sorted({r.kind for r in self.records if r.kind not in KNOWN_KINDS})

    # ---- progress ---------------------------------------------------------------------------------
    @property
    def evaluations(self) -> list[R.Evaluation]:
        return self.run_state.evaluations

    @property
    def bests(self) -> list[R.BestRecord]:
        """Every new global best, as the search announced it, in the order they happened."""
        return self.run_state.bests

    @property
    def best(self) -> R.BestRecord | None:
        return self.bests[-1] if self.bests else None

    @property
    def usage(self) -> ModelUsage:
        return self.run_state.usage

    @property
    def baseline(self) -> BaselineTimes | None:
        return self.run_state.baseline

    @property
    def tree(self) -> dict[str, Any] | None:
        """The last tree snapshot."""
        return self.run_state.snapshot

    @property
    def rounds(self) -> int:
        """The last round that was worked on (an evaluation, or a round that produced no code)."""
        rounds = [e.round for e in self.evaluations] + [r.round for r in self.of(R.BadCode)]
        return max(rounds, default=0)

    def best_by_round(self) -> list[tuple[int, float | None]]:
        """(round, best score after that round) for every round from the first evaluated one."""
        if not self.evaluations and not self.bests:
            return []
        first = min([e.round for e in self.evaluations] + [b.round for b in self.bests])
        out, best, i = [], None, 0
        bests = sorted(self.bests, key=lambda b: (b.round, b.seq))
        for r in range(first, self.rounds + 1):
            while i < len(bests) and bests[i].round <= r:
                best = bests[i].score
                i += 1
            out.append((r, best))
        return out

    def reached(self, target: float) -> R.BestRecord | None:
        """The first best that reached `target` (a tiny tolerance absorbs float round-trips)."""
        return next((b for b in self.bests if (b.score or 0.0) >= target * (1 - 1e-9)), None)

    # ---- time -------------------------------------------------------------------------------------
    @property
    def started_at(self) -> float | None:
        return min((r.t for r in self.records if r.t is not None), default=None)

    @property
    def last_at(self) -> float | None:
        return max((r.t for r in self.records if r.t is not None), default=None)

    @property
    def wall_s(self) -> float | None:
        """First to last record. Includes any pause between a kill and a resume."""
        if self.started_at is None or self.last_at is None:
            return None
        return self.last_at - self.started_at

    @property
    def eval_s(self) -> float:
        """Time spent evaluating: every evaluation, plus side-by-side re-measurements of near-ties."""
        total = sum(e.report.elapsed_s or 0.0 for e in self.evaluations)
        for r in self.of(R.Remeasure):
            # the kernels of one re-measurement run in one job, and each report carries that job's time
            total += max((_num(x.get("elapsed_s")) for x in r.reports), default=0.0)
        return total

    def best_report(self) -> EvalReport | None:
        """The measurement the best was chosen on: a near-tie re-measurement replaces the first evaluation."""
        b = self.best
        if b is None:
            return None
        for end in reversed(self.of(R.RunEnd)):
            rep = (end.best or {}).get("report")
            if isinstance(rep, dict) and rep.get("solution_id") == b.solution_id:
                return report_from_json(rep)
        for r in reversed(self.of(R.Remeasure)):
            for rep in r.reports:
                if rep.get("solution_id") == b.solution_id and rep.get("score") == b.score:
                    return report_from_json(rep)
        e = self.evaluation_of(b.solution_id, b.round)
        return e.report if e else None

    @property
    def forked_from(self) -> dict[str, Any] | None:
        """{"from": RUN_DIR, "node": ID} for a run started with fork.from=..., else None."""
        fork = self.run_state.fork
        return {"from": fork.source, "node": fork.node} if fork else None

    def config_changes(self) -> list[R.ConfigChange]:
        """Settings changed when the run was resumed with overrides ("config" records), oldest first."""
        return list(self.run_state.config_changes)

    # ---- the tree and its nodes ---------------------------------------------------------------------
    def world_model(self):
        """The last tree snapshot as a WorldModel, or None before the model has built one."""
        return self.run_state.world_model()

    def evaluations_of(self, node_id: str) -> list[R.Evaluation]:
        return [e for e in self.evaluations if e.node_id == node_id]

    def evaluation_number(self, solution_id: str, round_index: int | None = None) -> int | None:
        """1-based position of a solution's evaluation among the run's evaluations (journal order)."""
        e = self.evaluation_of(solution_id, round_index)
        return self.evaluations.index(e) + 1 if e is not None else None

    def evaluation_of(self, solution_id: str, round_index: int | None = None) -> R.Evaluation | None:
        """The evaluation of a solution, preferring the given round (a solution can be evaluated twice)."""
        hits = [e for e in self.evaluations if e.solution_id == solution_id]
        exact = [e for e in hits if round_index is None or e.round == round_index]
        found = exact or hits
        return found[-1] if found else None

    def solution_source(self, solution_id: str | None) -> str | None:
        if not solution_id:
            return None
        for suffix in (".py", ".cu"):        # Triton or CUDA, as RunDir.save_solution wrote it
            path = self.run_dir / "solutions" / f"{solution_id}{suffix}"
            if path.is_file():
                return path.read_text()
        return None

    def solution_language(self, solution_id: str | None) -> str:
        cu = solution_id and (self.run_dir / "solutions" / f"{solution_id}.cu").is_file()
        return "cuda" if cu else "python"


def load_history(run_dir: str | Path) -> RunHistory:
    """Read a run directory. Raises NotARunError (a FileNotFoundError) when there is no run there."""
    run_dir = Path(run_dir)
    journal = run_dir / "journal.jsonl"
    _require_run(run_dir, journal)
    records, good = read_records(journal)
    torn = journal.stat().st_size != good
    config = _read_config(run_dir / "config.yaml")
    return RunHistory(run_dir, config, records, fold(records), torn, probe(run_dir))


def is_run_dir(path: str | Path) -> bool:
    return (Path(path) / "journal.jsonl").is_file()


def _require_run(run_dir: Path, journal: Path) -> None:
    if not run_dir.exists():
        raise NotARunError(f"{run_dir} does not exist; pass the run directory `ksearch run` printed "
                           f"(runs/<task>/<timestamp> by default)")
    if (run_dir / "sweep.json").is_file():
        raise NotARunError(f"{run_dir} is a sweep, not a run; its runs are the folders inside it "
                           f"(`ksearch compare {run_dir}` puts them side by side)")
    if not journal.is_file() or journal.stat().st_size == 0:
        inner = sorted(p.parent.name for p in run_dir.glob("*/journal.jsonl"))
        hint = (f"; the folders {', '.join(inner[:5])}{' ...' if len(inner) > 5 else ''} inside it are runs"
                if inner else "; `ksearch run` creates one and prints its path")
        raise NotARunError(f"{run_dir} is not a run directory (no journal.jsonl with records){hint}")


def _read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise NotARunError(f"{path} is not valid YAML ({e}); it should be the config `ksearch run` wrote") from None
    return data if isinstance(data, dict) else {}


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def _get(d: dict[str, Any], dotted: str) -> Any:
    cur: Any = d
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur

