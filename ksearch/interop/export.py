"""`ksearch export RUN --format flashinfer-bench`: a run's best kernel and its evaluations as
FlashInfer-Bench documents (Solution JSON, traces JSONL, and the definition they refer to).

Each trace's `performance.reference_latency_ms` is the latency of the baseline the run scored against
(named in `evaluation.environment.baseline`: FlashInfer on a GPU, the PyTorch reference on a CPU), and
`speedup_factor` is the speedup over it.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ksearch.eval.report import Status
from ksearch.instantiate.solution import Solution
from ksearch.interop.flashinfer_bench import (
    FibCorrectness,
    FibEvaluation,
    FibPerformance,
    FibTrace,
    FibWorkload,
    to_fib,
)
from ksearch.store.atomic import atomic_write
from ksearch.store.best_manifest import BestManifest, manifest_from_history


class ExportError(ValueError):
    """The run has nothing to export, or lacks a file it should hold."""


@dataclass
class Exported:
    solution: Path
    traces: Path
    definition: Path
    trace_count: int
    best: BestManifest                 # what the exported solution is (as best/manifest.json says)


def _workload_uuid(task: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"ksearch:{task}:{name}"))


def _inputs(definition: dict[str, Any] | None, params: dict[str, Any]) -> dict[str, Any]:
    """Per input: random tensors (ksearch synthesises them per trial), scalars with their value when known."""
    if not definition:
        return {}
    out: dict[str, Any] = {}
    for name, spec in definition.get("inputs", {}).items():
        if spec.get("shape") is None:
            if name in params:
                out[name] = {"type": "scalar", "value": params[name]}
        else:
            out[name] = {"type": "random"}
    return out


def traces_of(history: Any, definition: dict[str, Any] | None, names: dict[str, str]) -> list[FibTrace]:
    """One trace per (evaluation, workload), in journal order."""
    start = history.run_start
    workloads = {w["name"]: w for w in start.workloads if isinstance(w, dict) and "name" in w}
    baseline = history.baseline.best() if history.baseline else {}
    label = history.baseline.label if history.baseline else ""
    out = []
    for ev in history.evaluations:
        rep = ev.report
        env = {"device": rep.device, "baseline": label, **(rep.env or {})}
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ev.t)) if ev.t else ""
        for w in rep.workloads:
            wl = workloads.get(w.workload, {"name": w.workload, "axes": {}, "params": {}})
            ref = w.baseline_ms or baseline.get(w.workload)
            passed = w.status == Status.PASSED
            perf = FibPerformance(latency_ms=w.latency_ms, reference_latency_ms=ref,
                                  speedup_factor=(ref / w.latency_ms) if passed and ref and w.latency_ms else None)
            out.append(FibTrace(
                definition=history.task,
                workload=FibWorkload(uuid=_workload_uuid(history.task, w.workload), axes=wl.get("axes", {}),
                                     inputs=_inputs(definition, wl.get("params", {}))),
                solution=names.get(ev.solution_id, f"ksearch_{ev.solution_id}"),
                evaluation=FibEvaluation(
                    status=w.status, log=w.message, environment=env, timestamp=stamp,
                    correctness=FibCorrectness(max_absolute_error=w.max_abs_error,
                                               max_relative_error=w.max_rel_error),
                    performance=perf if passed else None)))
    return out


def export_flashinfer_bench(run_dir: Path, out: Path | None = None) -> Exported:
    from ksearch.store import load_history

    history = load_history(run_dir)
    best_json = Path(run_dir) / "best" / "solution.json"
    if history.best is None or not best_json.is_file():
        raise ExportError(f"{run_dir} has no passing kernel yet (no best/solution.json); nothing to export")
    out = Path(out) if out else Path(run_dir) / "export" / "flashinfer-bench"
    best = Solution.from_json(json.loads(best_json.read_text()))
    hardware = [history.device] if history.device.startswith("cuda") else list(best.target_hardware)
    name = f"ksearch_{history.task}_{best.solution_id}"
    fib = to_fib(best, name=name, target_hardware=hardware)
    manifest = manifest_from_history(history)
    assert manifest is not None
    fib.description = (f"best kernel of ksearch run {Path(run_dir).name}: {manifest.score:.4g}x vs "
                       f"{manifest.baseline} on {history.device}; the {manifest.describe()}")
    definition = _definition(history.task)
    names = {best.solution_id: name}
    for sid in dict.fromkeys(e.solution_id for e in history.evaluations):    # every kernel a trace names
        f = Path(run_dir) / "solutions" / f"{sid}.json"
        if sid in names or not f.is_file():
            continue
        names[sid] = f"ksearch_{history.task}_{sid}"
        other = to_fib(Solution.from_json(json.loads(f.read_text())), name=names[sid], target_hardware=hardware)
        atomic_write(out / "solutions" / f"{names[sid]}.json", other.model_dump_json(indent=2))
    traces = traces_of(history, definition, names)
    sol_path = atomic_write(out / "solutions" / f"{name}.json", fib.model_dump_json(indent=2))
    trace_path = atomic_write(out / "traces" / f"{history.task}.jsonl",
                              "".join(t.model_dump_json(exclude_none=True) + "\n" for t in traces))
    def_path = atomic_write(out / "definitions" / f"{history.task}.json", json.dumps(definition or {}, indent=2))
    return Exported(sol_path, trace_path, def_path, len(traces), manifest)


def _definition(task: str) -> dict[str, Any] | None:
    from ksearch.task import UnknownTaskError, load_task

    try:
        return load_task(task).definition.to_json()
    except UnknownTaskError:
        return None
