"""One typed reader for a run directory, shared by `ksearch show`, `report`, `compare` and sweeps.

The journal is the source of truth (DESIGN.md: state can be rebuilt from it alone), but its records are
plain dicts whose kinds grow over time. Reading it in one place keeps the views consistent with each
other and lets them survive a journal that is still being written (a torn last line), record kinds
this reader does not know yet (they are kept, grouped by kind, and otherwise ignored), and fields that
a newer or older version of ksearch adds or lacks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import yaml

from ksearch.eval.report import BaselineTimes, EvalReport, WorkloadResult
from ksearch.store import records as R
from ksearch.store.journal import read_journal
from ksearch.store.lock import WriterState, probe

#: Record kinds this reader interprets; any other kind is kept in `RunHistory.by_kind` untouched.
KNOWN_KINDS = ("run_start", "baseline", "model", "edit", "select", "evaluation", "best", "attach",
               "cycle_failed", "bad_code", "tree", "run_end", "config", "fork", "remeasure", "not_best",
               "validate", "validate_verdict", "dispatch")     # [shapes] held-out gate, shape dispatch


class NotARunError(FileNotFoundError):
    """The path holds no run; the message says what it is instead and what to pass."""


@dataclass
class Evaluation:
    """One evaluated candidate: the journal's `evaluation` record with its report parsed."""

    seq: int
    t: float
    round: int
    node_id: str
    attempt: int
    solution_id: str
    report: EvalReport

    @property
    def passed(self) -> bool:
        return self.report.passed

    @property
    def score(self) -> float | None:
        return self.report.score if self.report.passed else None


@dataclass
class BestPoint:
    """A new global best, as the search announced it (`best` records), in the order they happened."""

    seq: int
    t: float
    round: int
    score: float
    node_id: str
    solution_id: str


@dataclass
class ModelUsage:
    """Totals over the model records. Replayed answers are recorded once, so nothing is counted twice."""

    requests: int = 0
    cost_usd: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    by_model: dict[str, int] = field(default_factory=dict)
    by_purpose: dict[str, int] = field(default_factory=dict)

    def add(self, model: str, purpose: str, usage: dict[str, Any]) -> None:
        self.requests += 1
        self.by_model[model] = self.by_model.get(model, 0) + 1
        self.by_purpose[purpose] = self.by_purpose.get(purpose, 0) + 1
        self.cost_usd += _num(usage.get("cost_usd"))
        prompt, completion = int(_num(usage.get("prompt_tokens"))), int(_num(usage.get("completion_tokens")))
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        self.total_tokens += int(_num(usage.get("total_tokens"))) or prompt + completion


@dataclass
class RunHistory:
    """Everything a view needs about one run, read once from its directory."""

    run_dir: Path
    config: dict[str, Any]
    records: list[dict[str, Any]]
    by_kind: dict[str, list[dict[str, Any]]]
    evaluations: list[Evaluation]
    bests: list[BestPoint]
    usage: ModelUsage
    tree: dict[str, Any] | None                 # the last tree snapshot
    baseline: BaselineTimes | None
    stop_reason: str | None                     # None while the run has no run_end record
    started_at: float | None
    last_at: float | None
    ended_at: float | None
    torn_tail: bool = False                     # the journal ends in a partial line (being written, or killed)
    writer: WriterState = WriterState(False, None)   # a live writer holds the run's lock; else the last one

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
    def run_start(self) -> dict[str, Any]:
        starts = self.by_kind.get("run_start", [])
        return starts[0] if starts else {}

    @property
    def task(self) -> str:
        return self.run_start.get("task") or _get(self.config, "task.name") or "?"

    @property
    def device(self) -> str:
        return self.run_start.get("device") or "?"

    @property
    def workload_set(self) -> str:
        return self.run_start.get("workload_set") or "?"

    @property
    def model(self) -> str:
        """The model that answered: run_start's name (e.g. openai/gpt-5.2), else the config's llm."""
        name = self.run_start.get("model")
        if name:
            return str(name)
        return str(_get(self.config, "llm.model") or _get(self.config, "llm.kind") or "?")

    @property
    def policy(self) -> str:
        return str(_get(self.config, "search.policy") or "?")

    @property
    def seed(self) -> Any:
        return _get(self.config, "run.seed")

    @property
    def ended(self) -> bool:
        return self.stop_reason is not None

    @property
    def unknown_kinds(self) -> list[str]:
        return sorted(k for k in self.by_kind if k not in KNOWN_KINDS)

    # ---- progress ---------------------------------------------------------------------------------
    @property
    def best(self) -> BestPoint | None:
        return self.bests[-1] if self.bests else None

    @property
    def rounds(self) -> int:
        """The last round that was worked on (an evaluation, or a round that produced no code)."""
        rounds = [e.round for e in self.evaluations]
        rounds += [int(r.get("round", 0)) for r in self.by_kind.get("bad_code", [])]
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

    def reached(self, target: float) -> BestPoint | None:
        """The first best that reached `target` (a tiny tolerance absorbs float round-trips)."""
        return next((b for b in self.bests if b.score >= target * (1 - 1e-9)), None)

    # ---- time -------------------------------------------------------------------------------------
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
        for r in self.by_kind.get("remeasure", []):
            reports = (r.get("value") or {}).get("reports") if isinstance(r.get("value"), dict) else None
            # the kernels of one re-measurement run in one job, and each report carries that job's time
            total += max((_num(x.get("elapsed_s")) for x in reports or [] if isinstance(x, dict)), default=0.0)
        return total

    def best_report(self) -> EvalReport | None:
        """The measurement the best was chosen on: a near-tie re-measurement replaces the first evaluation."""
        b = self.best
        if b is None:
            return None
        for end in reversed(self.by_kind.get("run_end", [])):
            rep = (end.get("best") or {}).get("report")
            if isinstance(rep, dict) and rep.get("solution_id") == b.solution_id:
                return report_from_json(rep)
        for r in reversed(self.by_kind.get("remeasure", [])):
            value = r.get("value") if isinstance(r.get("value"), dict) else {}
            for rep in value.get("reports") or []:
                if isinstance(rep, dict) and rep.get("solution_id") == b.solution_id and rep.get("score") == b.score:
                    return report_from_json(rep)
        e = self.evaluation_of(b.solution_id, b.round)
        return e.report if e else None

    @property
    def forked_from(self) -> dict[str, Any] | None:
        """{"from": RUN_DIR, "node": ID} for a run started with fork.from=..., else None."""
        forks = self.by_kind.get("fork", [])
        return {"from": forks[0].get("from"), "node": forks[0].get("node")} if forks else None

    def config_changes(self) -> list[dict[str, Any]]:
        """Settings changed when the run was resumed with overrides ("config" records), oldest first."""
        return list(self.by_kind.get("config", []))

    # ---- the tree and its nodes ---------------------------------------------------------------------
    def world_model(self):
        """The last tree snapshot as a WorldModel, or None before the model has built one."""
        from ksearch.world_model import WorldModel

        return WorldModel.from_json(self.tree) if self.tree is not None else None

    def evaluations_of(self, node_id: str) -> list[Evaluation]:
        return [e for e in self.evaluations if e.node_id == node_id]

    def evaluation_number(self, solution_id: str, round_index: int | None = None) -> int | None:
        """1-based position of a solution's evaluation among the run's evaluations (journal order)."""
        e = self.evaluation_of(solution_id, round_index)
        return self.evaluations.index(e) + 1 if e is not None else None

    def evaluation_of(self, solution_id: str, round_index: int | None = None) -> Evaluation | None:
        """The evaluation of a solution, preferring the given round (a solution can be evaluated twice)."""
        hits = [e for e in self.evaluations if e.solution_id == solution_id]
        exact = [e for e in hits if round_index is None or e.round == round_index]
        return (exact or hits or [None])[-1]

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

    def iter_kind(self, kind: str) -> Iterator[dict[str, Any]]:
        yield from self.by_kind.get(kind, [])


def load_history(run_dir: str | Path) -> RunHistory:
    """Read a run directory. Raises NotARunError (a FileNotFoundError) when there is no run there."""
    run_dir = Path(run_dir)
    journal = run_dir / "journal.jsonl"
    _require_run(run_dir, journal)
    records, good = read_journal(journal)
    torn = journal.stat().st_size != good
    config = _read_config(run_dir / "config.yaml")

    by_kind: dict[str, list[dict[str, Any]]] = {}
    evaluations: list[Evaluation] = []
    bests: list[BestPoint] = []
    usage = ModelUsage()
    tree = baseline = stop = ended_at = None
    for raw in records:
        r = R.parse_record(raw)
        by_kind.setdefault(r.kind, []).append(raw)
        if isinstance(r, R.Evaluation) and r.value:
            evaluations.append(Evaluation(r.seq, _num(r.t), r.round, r.node_id, r.attempt,
                                          r.solution_id or r.value.get("solution_id", ""), report_from_json(r.value)))
        elif isinstance(r, R.BestRecord) and r.score is not None:
            bests.append(BestPoint(r.seq, _num(r.t), r.round, r.score, r.node_id, r.solution_id))
        elif isinstance(r, R.ModelCall):
            usage.add(str(r.value.get("model") or "?"), r.purpose, r.usage)
        elif isinstance(r, R.TreeSnapshot) and r.tree:
            tree = r.tree
        elif isinstance(r, R.Baseline) and r.value and (baseline is None or _is_search_set(r.key, by_kind)):
            # the search set's baseline (the validate set has its own record, with other workloads)
            baseline = _baseline_from_json(r.value) or baseline
        elif isinstance(r, R.RunEnd):
            stop, ended_at = str(r.stop or "ended"), r.t
        if r.kind not in ("run_end", "tree") and stop is not None:
            stop = ended_at = None      # a resume went on after this end (e.g. a larger budget): not ended
    times = [r["t"] for r in records if isinstance(r.get("t"), (int, float))]
    return RunHistory(run_dir, config, records, by_kind, evaluations, bests, usage, tree, baseline, stop,
                      min(times, default=None), max(times, default=None), ended_at, torn, probe(run_dir))


def _is_search_set(key: str, by_kind: dict[str, list[dict[str, Any]]]) -> bool:
    """Whether a baseline record's key (device:workload_set:seed) is the run's search set."""
    start = (by_kind.get("run_start") or [{}])[0]
    parts = key.split(":")
    return bool(start.get("workload_set")) and len(parts) >= 3 and parts[-2] == start.get("workload_set")


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


def _fields(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    """The keys of `d` that `cls` accepts: a journal from another ksearch version still reads."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def report_from_json(d: dict[str, Any]) -> EvalReport:
    d = _fields(EvalReport, d)
    d["workloads"] = [WorkloadResult(**_fields(WorkloadResult, w)) for w in d.get("workloads", [])
                      if isinstance(w, dict)]
    d.setdefault("solution_id", "")
    d.setdefault("status", "?")
    d.setdefault("device", "?")
    return EvalReport(**d)


def _baseline_from_json(d: dict[str, Any]) -> BaselineTimes | None:
    d = _fields(BaselineTimes, d)
    if not {"device", "variants", "label"} <= set(d):
        return None
    return BaselineTimes(**d)


def _num(v: Any) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def _get(d: dict[str, Any], dotted: str) -> Any:
    cur: Any = d
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur

