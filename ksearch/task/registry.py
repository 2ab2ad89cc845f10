"""Find task folders and load them into typed Task objects.

Tasks are looked up, first match wins, in: the folders of `KSEARCH_TASKS_DIR` (os.pathsep-separated),
the folders added with `add_task_dirs` (`task.dir=` in a config), then the tasks that ship with ksearch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

import ksearch.task.snapshot as _snapshot
from ksearch import data_dir
from ksearch.task.definition import Definition, DefinitionError, parse_definition
from ksearch.task.workload import Correctness, Workload


class UnknownTaskError(LookupError):
    """Raised with the list of known tasks so the user can fix the name."""


_EXTRA_DIRS: list[Path] = []


def tasks_dir() -> Path:
    """The folder of the tasks that ship with ksearch (the checkout's tasks/, or the installed copy)."""
    return data_dir("tasks")


def add_task_dirs(*dirs: str | Path) -> None:
    """Search these folders for tasks too (after KSEARCH_TASKS_DIR, before the bundled tasks)."""
    for d in dirs:
        p = Path(d).expanduser().resolve()
        if p not in _EXTRA_DIRS:
            _EXTRA_DIRS.append(p)


def task_roots() -> list[Path]:
    env = [Path(p).expanduser().resolve() for p in os.environ.get("KSEARCH_TASKS_DIR", "").split(os.pathsep) if p]
    out: list[Path] = []
    for p in [*env, *_EXTRA_DIRS, tasks_dir()]:
        if p not in out:
            out.append(p)
    return out


def _names_in(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "definition.json").is_file())


def list_tasks(root: Path | None = None) -> list[str]:
    if root is not None:
        return _names_in(root)
    return sorted({n for r in task_roots() for n in _names_in(r)})


def import_file(module_name: str, path: Path) -> ModuleType:
    """The module in `path`, imported once under `module_name` (left out of sys.modules if it raises)."""
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[module_name]
        raise
    return mod


def _module_from_snapshot(module_name: str, snap: _snapshot.TaskSnapshot, stem: str) -> ModuleType:
    """`<stem>.py` compiled from the pinned snapshot's bytes (the folder on disk is not read)."""
    held = sys.modules.get(module_name)
    if held is not None and getattr(held, "__ksearch_task_digest__", None) == snap.digest:
        return held
    source = snap.read(f"{stem}.py")
    path = Path(snap.origin) / f"{stem}.py"
    if source is None:
        raise ImportError(f"task {snap.name} has no {stem}.py")
    mod = ModuleType(module_name)
    mod.__file__ = str(path)
    mod.__ksearch_task_digest__ = snap.digest  # type: ignore[attr-defined]  # our mark on the module
    sys.modules[module_name] = mod
    try:
        exec(compile(source, str(path), "exec"), mod.__dict__)
    except BaseException:
        del sys.modules[module_name]
        raise
    return mod


def task_module(task_dir: Path, stem: str) -> ModuleType:
    """A task folder's `<stem>.py`, imported once under the name `Task` uses (so files can share it).

    When the folder's snapshot is pinned in this process (ksearch.task.snapshot), from its bytes."""
    module_name = f"ksearch_tasks.{task_dir.name}.{stem}"
    snap = _snapshot.pinned(task_dir)
    if snap is not None:
        return _module_from_snapshot(module_name, snap, stem)
    return import_file(module_name, task_dir / f"{stem}.py")


@dataclass
class Task:
    """Everything the evaluator and the offline model need to know about one kernel."""

    name: str
    dir: Path
    definition: Definition
    correctness: Correctness
    meta: dict[str, Any] = field(default_factory=dict)

    def _module(self, stem: str) -> ModuleType:
        return task_module(self.dir, stem)

    @cached_property
    def workloads_module(self) -> ModuleType:
        return self._module("workloads")

    def workload_sets(self) -> dict[str, list[Workload]]:
        return self.workloads_module.workload_sets()

    def dataset_workloads(self, dataset_dir: str | Path) -> list[Workload]:
        """The workloads of a local FlashInfer-Trace copy (captured index tensors included)."""
        from ksearch.task.dataset import dataset_workloads
        return dataset_workloads(Path(dataset_dir), self.definition)

    def workload_set(self, name: str) -> list[Workload]:
        sets = self.workload_sets()
        if name not in sets:
            raise KeyError(f"task {self.name} has no workload set {name!r}; it has {sorted(sets)}")
        return sets[name]

    def make_inputs(self, workload: Workload, *, device: str, seed: int) -> dict[str, Any]:
        """Inputs in definition order, synthesised deterministically from `seed` (or read from a dataset)."""
        if "dataset_inputs" in workload.params:
            from ksearch.task.dataset import dataset_inputs
            inputs = dataset_inputs(self.definition, workload, device=device, seed=seed)
        else:
            inputs = self.workloads_module.make_inputs(workload, device=device, seed=seed)
        names = self.definition.input_names
        if list(inputs) != names:
            raise ValueError(f"{self.name}: make_inputs returned {list(inputs)}, expected {names}")
        return inputs

    @cached_property
    def roofline_module(self) -> ModuleType | None:
        """tasks/<name>/roofline.py: the task's traffic and FLOP formulas, if it declares them."""
        return self._module("roofline") if self.has_file("roofline.py") else None

    def traffic_bytes(self, workload: Workload) -> int | None:
        """The fewest bytes a kernel must move for this workload (inputs read once, outputs written), if known."""
        fn = getattr(self.roofline_module, "traffic_bytes", None)
        return int(fn(workload)) if fn else None

    def flops(self, workload: Workload) -> int | None:
        """The useful FLOPs of this workload (causal: the unmasked part only), if known."""
        fn = getattr(self.roofline_module, "flops", None)
        return int(fn(workload)) if fn else None

    @property
    def compute_dtype(self) -> str | None:
        """Which tensor-core peak bounds this task's FLOPs: "bf16", "fp8" or "fp32" (None if undeclared)."""
        return getattr(self.roofline_module, "compute_dtype", None)

    @cached_property
    def reference(self) -> Callable[..., Any]:
        sys.audit("ksearch.task_reference", self.name)     # a candidate's process refuses it (ksearch.eval.candidate.audit)
        namespace: dict[str, Any] = {"__name__": f"ksearch_tasks.{self.name}.reference"}
        exec(compile(self.definition.reference, str(self.dir / "reference.py"), "exec"), namespace)
        return namespace["run"]

    def baselines(self) -> dict[str, Callable[[dict[str, Any]], Callable[[], Any]]]:
        """Baseline factories by name (GPU only): factory(inputs) plans once, returns a zero-arg call."""
        if not self.has_file("baseline.py"):
            return {}
        return dict(self._module("baseline").BASELINES)

    @property
    def strategies_dir(self) -> Path:
        return self.dir / "strategies"

    def has_file(self, filename: str) -> bool:
        snap = _snapshot.pinned(self.dir)
        return snap.read(filename) is not None if snap is not None else (self.dir / filename).is_file()

    def default_workload_set(self, on_gpu: bool) -> str:
        return self.meta["default_sets"]["gpu" if on_gpu else "cpu"]


class DefaultSets(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cpu: str = "tiny"
    gpu: str = "feedback"


class TaskMeta(BaseModel):
    """task.yaml: evaluation settings of one task. Keys other parts of ksearch read (e.g. static_checks)
    are kept as given and checked by their readers."""

    model_config = ConfigDict(extra="allow")
    correctness: Correctness = Correctness()
    default_sets: DefaultSets = DefaultSets()
    static_checks: dict[str, Any] | None = None


def _find(name: str) -> Path | None:
    for root in task_roots():
        if (root / name / "definition.json").is_file():
            return root / name
    return None


def load_task(name: str, root: Path | None = None) -> Task:
    snap = _snapshot.pinned(root / name) if root is not None else _snapshot.pinned_named(name)
    if snap is not None and snap.name == name:
        return _task_from_snapshot(snap)
    task_dir = root / name if root is not None else _find(name)
    if task_dir is None or not (task_dir / "definition.json").is_file():
        known = ", ".join(list_tasks(root)) or "(none)"
        raise UnknownTaskError(f"unknown task {name!r}; known tasks: {known}. `ksearch tasks` lists them "
                               f"(add folders of your own with KSEARCH_TASKS_DIR or task.dir=).")

    def read(filename: str) -> str | None:
        path = task_dir / filename
        return path.read_text() if path.exists() else None

    return _build_task(name, task_dir, read)


_SNAPSHOT_TASKS: dict[str, Task] = {}


def _task_from_snapshot(snap: _snapshot.TaskSnapshot) -> Task:
    """One Task per pinned snapshot and process: its modules are compiled once, from the snapshot's bytes."""
    task = _SNAPSHOT_TASKS.get(snap.digest)
    if task is None:
        task = _build_task(snap.name, Path(snap.origin), snap.text)
        _SNAPSHOT_TASKS[snap.digest] = task
    return task


def _build_task(name: str, task_dir: Path, read: Callable[[str], str | None]) -> Task:
    text = read("definition.json")
    if text is None:
        raise UnknownTaskError(f"{task_dir} has no definition.json")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise DefinitionError(f"{task_dir / 'definition.json'}: not valid JSON: {e}") from e
    definition = parse_definition(doc, read("reference.py"))
    if definition.name != name:
        raise UnknownTaskError(f"{task_dir}/definition.json names {definition.name!r}, not {name!r}")
    meta_path = task_dir / "task.yaml"
    meta_text = read("task.yaml")
    raw = (yaml.safe_load(meta_text) or {}) if meta_text is not None else {}
    try:
        meta = TaskMeta.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise UnknownTaskError(f"{meta_path}: {where}: {first['msg']}") from None
    plain = meta.model_dump(exclude_none=True)
    return Task(name=name, dir=task_dir, definition=definition, correctness=meta.correctness, meta=plain)
