"""One run's link to the knowledge store: what it recalls when it starts, what it writes as it goes.

Recall happens once, before the initial world model is asked for, and is journaled (record kind
"memory", keyed by task signature and GPU): a resumed run takes it from its journal and never reads the
live store, so a store that changed since (or is gone) cannot change what it asks. A run that started
with `memory.enabled=false` (or before ksearch had a memory) recalls nothing and records nothing.
Where the evidence comes from: the store, or with `llm.replay=RUN_DIR` the recording's own memory
record, so a replay asks exactly what the recorded run asked.

Writes: every evaluation of a search candidate becomes rows (the whole workload set, then each region
of the shape space it passed on) as soon as the owner of the search has it, unless memory is disabled,
`memory.write=false` (runs that must start from the same memory, e.g. arms of a comparison), or the run
is a replay of a recording (its measurements are the recording's, already stored). A store that cannot
be written is said once and the search goes on without it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ksearch.knowledge.recall import Recall, build_recall
from ksearch.knowledge.signature import TaskSignature, signature_of
from ksearch.knowledge.store import ALL_REGIONS, EvaluationRow, KnowledgeStore, StoreError, default_path
from ksearch.profile.model import read_profile

#: The journal record kind a run's recall is kept under.
RECORD_KIND = "memory"


def gpu_label(device: str, env: Mapping[str, Any] | None) -> str:
    """"cpu" on a CPU, else the GPU's name as the judge reported it (e.g. "NVIDIA H200")."""
    if not device.startswith("cuda"):
        return "cpu"
    name = (env or {}).get("gpu")
    return str(name) if name else device


def memory_on_at_start(config: Mapping[str, Any] | None) -> bool:
    """Whether a run's first segment ran with memory (a config recorded before memory existed: no)."""
    section = (config or {}).get("memory")
    return bool(section.get("enabled")) if isinstance(section, Mapping) else False


def store_path(memory_cfg: Any) -> Path:
    path = memory_cfg.get("path") if isinstance(memory_cfg, Mapping) else getattr(memory_cfg, "path", None)
    return Path(str(path)).expanduser() if path else default_path()


def kernel_identity(code: str | None, wm: Any, node: Any) -> tuple[str, dict[str, Any]]:
    """(family, knob settings) of a kernel: its plan header when it has one (the offline model writes
    it), else the node's kernel family as the tree names it and the step's settings."""
    from ksearch.llm.offline import read_plan_header
    from ksearch.world_model.facts import family_of

    plan = read_plan_header(code)
    if plan is not None:
        return str(plan["family"]), dict(plan.get("knobs") or {})
    fam = family_of(wm, node)
    params = (node.action.params if node.action else None) or {}
    name = ((fam.action.params or {}).get("family") if fam is not None and fam.action else None) \
        or (fam.step if fam is not None else "") or node.node_id
    knobs = params.get("set")
    return str(name), dict(knobs) if isinstance(knobs, dict) else {}


class RunMemory:
    def __init__(self, task: Any, store: KnowledgeStore | None = None, *, write: bool = False,
                 recording: Path | None = None):
        self.signature: TaskSignature = signature_of(task.definition)
        self.store = store
        self.write = write and store is not None
        self.recording = recording
        self.gpu = ""
        self.run_id = ""
        self.workload_set = ""
        self._on_at_start = False
        self._warned = False

    @classmethod
    def disabled(cls, task: Any) -> RunMemory:
        return cls(task)

    @classmethod
    def for_run(cls, cfg: Any, task: Any) -> RunMemory:
        """From the settings of the process running the search (memory.*, llm.replay). Raises StoreError
        when memory is on and its store cannot be opened."""
        replay = cfg.llm.get("replay") if hasattr(cfg.llm, "get") else getattr(cfg.llm, "replay", None)
        if not cfg.memory.enabled:
            return cls(task, recording=Path(str(replay)) if replay else None)
        return cls(task, KnowledgeStore(store_path(cfg.memory)), write=bool(cfg.memory.write) and not replay,
                   recording=Path(str(replay)) if replay else None)

    def begin(self, run_start: Any, run_path: Path, device: str, workload_set: str,
              baseline_env: Mapping[str, Any] | None) -> None:
        """Name the run (its folder and start time: the same on every resume) and the GPU it runs on.
        `run_start`: the run's first RunStart record (the one a resume finds in its journal)."""
        self.gpu = gpu_label(device, baseline_env)
        self.workload_set = workload_set
        stamp = f"{Path(run_path).resolve()}@{run_start.t}"
        self.run_id = f"{Path(run_path).name}-{hashlib.sha1(stamp.encode()).hexdigest()[:10]}"
        self._on_at_start = memory_on_at_start(run_start.config)

    # ---- recall -----------------------------------------------------------------------------------
    def recall(self, journal: Any, notify: Callable[[str], None]) -> Recall:
        """The evidence this run starts from: journaled once, replayed from the journal on resume."""
        if not self._on_at_start:
            return Recall()
        key = f"{self.signature.digest}@{self.gpu}"
        from ksearch.store.records import MemoryRecall

        recalled = Recall.model_validate(journal.memo(MemoryRecall(key=key),
                                                      lambda: self._lookup(notify).to_json()).value)
        if not recalled.empty:
            best = recalled.best()
            head = f"best {best.family} {best.best_score:.4g}x" if best and best.best_score is not None else \
                f"{len(recalled.weak)} families ranked on tasks of op type {recalled.op_type}"
            notify(f"memory: {recalled.strong_runs} earlier run(s) of this kernel on {recalled.gpu} ({head}); "
                   f"from {recalled.source}")
        return recalled

    def _lookup(self, notify: Callable[[str], None]) -> Recall:
        sig = self.signature
        if self.recording is not None:
            return self._from_recording(self.recording)
        if self.store is None:
            return Recall(source="none", signature=sig.digest, op_type=sig.op_type, gpu=self.gpu)
        try:
            rows = self.store.rows(op_type=sig.op_type)
        except StoreError as e:
            notify(f"memory: {e}; this run starts from the catalog's priors")
            return Recall(source="none", signature=sig.digest, op_type=sig.op_type, gpu=self.gpu, note=str(e))
        return build_recall(rows, sig.digest, sig.op_type, self.gpu, source=str(self.store.path))

    def _from_recording(self, recording: Path) -> Recall:
        from ksearch.store import read_records
        from ksearch.store.records import MemoryRecall, of_kind

        records, _ = read_records(recording / "journal.jsonl")
        for r in of_kind(records, MemoryRecall):
            return Recall.model_validate(r.value)
        return Recall(source=f"{recording} (it recorded no memory)", signature=self.signature.digest,
                      op_type=self.signature.op_type, gpu=self.gpu)

    # ---- writes -----------------------------------------------------------------------------------
    def observe(self, wm: Any, node: Any, *, solution_id: str, round_index: int, code: str | None,
                report: Any, region_scores: Mapping[str, float], notify: Callable[[str], None]) -> None:
        """Store one evaluation of a search candidate (no-op when memory does not write)."""
        if not self.write or self.store is None or not self.run_id:
            return
        family, knobs = kernel_identity(code, wm, node)
        reading = read_profile(report.to_json())
        sig = self.signature

        def row(region: str, status: str, score: float | None, profile: dict[str, Any] | None) -> EvaluationRow:
            return EvaluationRow(sig.digest, sig.op_type, sig.task, self.gpu, family, knobs, region, status, score,
                                 profile, self.run_id, solution_id, round_index, self.workload_set)

        rows = [row(ALL_REGIONS, str(report.status), report.score if report.passed else None,
                    reading.profile.to_json() if reading.profile else None)]
        rows += [row(region, str(report.status), score, None) for region, score in sorted(region_scores.items())]
        try:
            self.store.add(rows)
        except StoreError as e:
            if not self._warned:
                notify(f"memory: {e}; this run's evaluations are not remembered")
                self._warned = True

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
