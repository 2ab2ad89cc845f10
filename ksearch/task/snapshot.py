"""A task's files, read once by the trusted side and kept in memory: what every later judgement uses.

Why: a candidate that escapes its sandbox for a moment could rewrite the task's files on disk (task.yaml's
tolerance, the reference, the input generator). If anything judged later (the next candidate, a
re-measurement, the validate gate) read them again, the escape would last. So the evaluator takes a
snapshot of the task folder's files when it is created (`take`, once per process and folder: the first read
wins), the trusted worker pins it before its first job (`pin`), and the candidate's process gets it in its
payload: from then on `load_task` and `task_module` in those processes build the task from these bytes and
never open the folder again.

A snapshot holds the folder's top-level files a judgement reads (definition.json, task.yaml and the task's
Python modules: reference, workloads, roofline, baseline); the strategy catalog is the planner's and stays
on disk. A candidate's process gets `for_candidate()`: the same files without the reference's source (a
stand-in that refuses takes reference.py's place), since bytes pinned there are bytes the candidate reads.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path

SNAPSHOT_FILES = ("definition.json", "task.yaml")
MAX_FILE_BYTES = 16 << 20
REFERENCE_STAND_IN = b'''"""The task's reference belongs to the judge: a candidate's process holds this stand-in."""


def run(*args, **kwargs):
    import sys

    sys.audit("ksearch.task_reference", "stand-in")
    raise PermissionError("the task's reference is the judge's: it is not in the candidate's process")
'''


@dataclass(frozen=True)
class TaskSnapshot:
    """One task folder's files as bytes, with where they were read from (picklable, a few tens of KB)."""

    name: str
    origin: str                              # the task folder, resolved
    files: tuple[tuple[str, bytes], ...]     # (file name, content), sorted by name
    digest: str

    def read(self, filename: str) -> bytes | None:
        for name, data in self.files:
            if name == filename:
                return data
        return None

    def text(self, filename: str) -> str | None:
        data = self.read(filename)
        return None if data is None else data.decode("utf-8")

    @property
    def dir(self) -> Path:
        return Path(self.origin)

    def for_candidate(self) -> TaskSnapshot:
        """These files as a candidate's process may hold them: reference.py a stand-in that refuses, and no
        reference source in definition.json."""
        files = []
        for name, data in self.files:
            if name == "reference.py":
                data = REFERENCE_STAND_IN
            elif name == "definition.json":
                doc = json.loads(data)
                if isinstance(doc, dict) and "reference" in doc:
                    data = json.dumps({k: v for k, v in doc.items() if k != "reference"}).encode()
            files.append((name, data))
        if not any(name == "reference.py" for name, _ in files):
            files = sorted(files + [("reference.py", REFERENCE_STAND_IN)])
        return TaskSnapshot(self.name, self.origin, tuple(files), _digest(files))


_TAKEN: dict[str, TaskSnapshot] = {}
_PINNED: dict[str, TaskSnapshot] = {}        # by origin folder
_LOCK = threading.Lock()


def _read_folder(name: str, folder: Path) -> TaskSnapshot:
    files = []
    for path in sorted(folder.iterdir()):
        if not path.is_file() or not (path.name in SNAPSHOT_FILES or path.suffix == ".py"):
            continue
        data = path.read_bytes()
        if len(data) > MAX_FILE_BYTES:
            raise ValueError(f"{path}: {len(data)} bytes; task files are at most {MAX_FILE_BYTES} bytes")
        files.append((path.name, data))
    return TaskSnapshot(name, str(folder), tuple(files), _digest(files))


def _digest(files: list[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for fname, data in files:
        digest.update(fname.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()[:16]


def take(name: str, task_dir: str | Path) -> TaskSnapshot:
    """The snapshot of `task_dir` for this process: read on the first call, the same bytes on every later one."""
    folder = Path(task_dir).resolve()
    pinned = _PINNED.get(str(folder))
    if pinned is not None:
        return pinned
    with _LOCK:
        snap = _TAKEN.get(str(folder))
        if snap is None:
            snap = _read_folder(name, folder)
            _TAKEN[str(folder)] = snap
        return snap


def pin(snap: TaskSnapshot) -> None:
    """From now on this process builds the task in `snap.origin` from `snap`, never from the folder."""
    with _LOCK:
        held = _PINNED.get(snap.origin)
        if held is not None and held.digest != snap.digest:
            raise ValueError(f"task folder {snap.origin} is already pinned to other contents ({held.digest} "
                             f"!= {snap.digest}); a process judges one version of a task")
        _PINNED[snap.origin] = snap
        _TAKEN[snap.origin] = snap


def pinned(task_dir: str | Path) -> TaskSnapshot | None:
    """The snapshot pinned for this folder (None: read it from disk)."""
    if not _PINNED:
        return None
    try:
        folder = str(Path(task_dir).resolve())
    except OSError:
        return None
    return _PINNED.get(folder)


def pinned_named(name: str) -> TaskSnapshot | None:
    for snap in _PINNED.values():
        if snap.name == name:
            return snap
    return None
