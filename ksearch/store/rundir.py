"""The run directory: resolved config, journal, solutions, and best/ with the best kernel and its report."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ksearch.instantiate.solution import Solution
from ksearch.store.atomic import atomic_write
from ksearch.store.best_manifest import MANIFEST_NAME, BestManifest

__all__ = ["RunDir", "default_run_dir", "atomic_write"]


def default_run_dir(task: str, root: Path = Path("runs")) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = root / task / stamp
    k = 1
    while path.exists():
        path = root / task / f"{stamp}-{k}"
        k += 1
    return path


class RunDir:
    def __init__(self, path: Path):
        self.path = Path(path)

    @property
    def journal_path(self) -> Path:
        return self.path / "journal.jsonl"

    @property
    def config_path(self) -> Path:
        return self.path / "config.yaml"

    def ensure_new(self) -> None:
        """Refuse a folder that already holds a run (a fresh run must not write over it)."""
        if self.journal_path.exists() and self.journal_path.stat().st_size > 0:
            raise FileExistsError(f"{self.path} already holds a run; use `ksearch resume {self.path}` to continue "
                                  f"it, or pick another run.dir")

    def create(self, config_yaml: str) -> None:
        self.ensure_new()
        (self.path / "solutions").mkdir(parents=True, exist_ok=True)
        atomic_write(self.config_path, config_yaml)

    def discard_if_empty(self) -> bool:
        """Undo `create` when nothing was recorded (the journal has no line): a start that failed leaves no
        half-made run behind. Returns whether it removed anything; a run with records is never touched."""
        journal = self.journal_path
        if journal.exists() and journal.stat().st_size > 0:
            return False
        solutions = self.path / "solutions"
        if solutions.is_dir() and any(solutions.iterdir()):
            return False
        for made in (self.config_path, journal):
            made.unlink(missing_ok=True)
        if solutions.is_dir():
            solutions.rmdir()
        return True

    def exists(self) -> bool:
        return self.journal_path.exists() and self.config_path.exists()

    def save_solution(self, solution: Solution) -> Path:
        """solutions/<id>.json (the solution object) and <id>.py or .cu (its main source, to read and diff)."""
        d = self.path / "solutions"
        d.mkdir(parents=True, exist_ok=True)
        sid = solution.solution_id
        suffix = ".cu" if solution.language == "cuda" else ".py"
        code_path = d / f"{sid}{suffix}"
        if not (d / f"{sid}.json").exists():
            atomic_write(code_path, solution.main_source)
            atomic_write(d / f"{sid}.json", json.dumps(solution.to_json(), indent=1))
        return code_path

    def load_solution(self, solution_id: str) -> Solution:
        return Solution.from_json(json.loads((self.path / "solutions" / f"{solution_id}.json").read_text()))

    def write_best(self, solution: Solution, report: dict[str, Any], manifest: BestManifest) -> None:
        """best/: the kernel (solution.py or .cu, and solution.json), its report, and manifest.json saying
        what it is (one node's kernel, or a shape dispatch over named nodes). The manifest is written last:
        a reader that finds it for this solution finds the rest."""
        best = self.path / "best"
        best.mkdir(parents=True, exist_ok=True)
        suffix = ".cu" if solution.language == "cuda" else ".py"
        stale = best / ("solution.py" if suffix == ".cu" else "solution.cu")
        if stale.exists():              # a CUDA best replaced a Triton one (or back): one kernel file only
            stale.unlink()
        atomic_write(best / f"solution{suffix}", solution.main_source)
        atomic_write(best / "solution.json", json.dumps(solution.to_json(), indent=1))
        node_id = manifest.members[0].node_id if manifest.members else "?"
        atomic_write(best / "report.json", json.dumps({"node_id": node_id, **report}, indent=1, default=str))
        atomic_write(best / MANIFEST_NAME, json.dumps(manifest.to_json(), indent=1))

    def write_tree(self, tree: dict[str, Any]) -> None:
        atomic_write(self.path / "tree.json", json.dumps(tree, indent=1, default=str))
