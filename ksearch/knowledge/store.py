"""The knowledge store: every evaluation of every run, in one SQLite file in the user's cache directory.

One row per (evaluation, shape region): the task's signature and op type, the GPU (or "cpu"), the
kernel's family and knob settings, the region ("all" for the whole workload set, else a region of the
task's shape space), the status and score, the hardware profile (JSON, or NULL), and which run, kernel
and round it came from. Rows are only ever added (or cleared by the user).

Concurrency and crashes: opening (switching to WAL, creating the schema) is done under an exclusive lock
on a sidecar file, because two connections switching a fresh file to WAL at once deadlock and SQLite then
fails one at once instead of waiting. After that the file is in WAL mode, every write is one short IMMEDIATE transaction, and a
busy timeout makes a writer wait for another instead of failing, so runs writing at once lose nothing; a
run killed mid-way loses at most the evaluation it was writing. A row is keyed by (run, kernel, round,
region) and added with INSERT OR IGNORE, so writing the same evaluation again (a resumed run replaying
its journal) is harmless.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ksearch.sqlite_files import NewerSchema, immediate, opening_lock, prepare

SCHEMA_VERSION = 1
ALL_REGIONS = "all"
BUSY_TIMEOUT_S = 30.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS evaluations (
    id INTEGER PRIMARY KEY,
    signature TEXT NOT NULL,
    op_type TEXT NOT NULL,
    task TEXT NOT NULL,
    gpu TEXT NOT NULL,
    family TEXT NOT NULL,
    knobs TEXT NOT NULL,
    region TEXT NOT NULL,
    status TEXT NOT NULL,
    score REAL,
    profile TEXT,
    run_id TEXT NOT NULL,
    solution_id TEXT NOT NULL,
    round INTEGER NOT NULL,
    workload_set TEXT NOT NULL,
    time REAL NOT NULL,
    UNIQUE (run_id, solution_id, round, region)
);
CREATE INDEX IF NOT EXISTS evaluations_by_task ON evaluations (signature, gpu);
CREATE INDEX IF NOT EXISTS evaluations_by_op ON evaluations (op_type);
"""
_COLUMNS = ("signature", "op_type", "task", "gpu", "family", "knobs", "region", "status", "score", "profile",
            "run_id", "solution_id", "round", "workload_set", "time")


class StoreError(RuntimeError):
    """The store cannot be opened or written; the message names the file and what to do."""


def default_path() -> Path:
    """$XDG_CACHE_HOME/ksearch/knowledge.sqlite (XDG: a relative value is ignored), else ~/.cache/..."""
    from ksearch import cache_dir

    return cache_dir() / "knowledge.sqlite"


@dataclass(frozen=True)
class EvaluationRow:
    signature: str
    op_type: str
    task: str
    gpu: str
    family: str
    knobs: dict[str, Any]
    region: str
    status: str
    score: float | None
    profile: dict[str, Any] | None
    run_id: str
    solution_id: str
    round: int
    workload_set: str
    time: float = field(default_factory=time.time)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def _values(self) -> tuple[Any, ...]:
        d = asdict(self)
        d["knobs"] = json.dumps(self.knobs, sort_keys=True, default=str)
        d["profile"] = json.dumps(self.profile, sort_keys=True) if self.profile is not None else None
        return tuple(d[c] for c in _COLUMNS)

    @staticmethod
    def _from_db(row: sqlite3.Row) -> EvaluationRow:
        d = {c: row[c] for c in _COLUMNS}
        d["knobs"] = json.loads(d["knobs"])
        d["profile"] = json.loads(d["profile"]) if d["profile"] is not None else None
        return EvaluationRow(**d)


class KnowledgeStore:
    def __init__(self, path: Path | str, *, busy_timeout_s: float = BUSY_TIMEOUT_S):
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path), timeout=busy_timeout_s, isolation_level=None,
                                       check_same_thread=False)
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"cannot open the knowledge store {self.path} ({e})") from None
        self._db.row_factory = sqlite3.Row
        try:
            with opening_lock(self.path):
                self._prepare(busy_timeout_s)
        except StoreError:
            self._db.close()
            raise
        except (OSError, sqlite3.Error) as e:
            self._db.close()
            raise StoreError(f"{self.path} is not a usable knowledge store ({e}); remove it or point "
                             f"memory.path= elsewhere") from None

    def _prepare(self, busy_timeout_s: float) -> None:
        """WAL mode and the schema; run by one opener at a time (see ksearch.sqlite_files.opening_lock)."""
        try:
            prepare(self._db, busy_timeout_s, _SCHEMA, SCHEMA_VERSION)
        except NewerSchema as e:
            raise StoreError(f"{self.path} was written by a newer ksearch (schema {e.found}); "
                             f"upgrade ksearch or point memory.path= elsewhere") from None

    # ---- writing ----------------------------------------------------------------------------------
    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        return immediate(self._db)

    def add(self, rows: Sequence[EvaluationRow]) -> int:
        """Add rows in one transaction; returns how many were new (a row seen before is ignored)."""
        if not rows:
            return 0
        marks = ", ".join("?" for _ in _COLUMNS)
        with self._lock:
            try:
                with self._write() as db:
                    before = db.total_changes
                    db.executemany(f"INSERT OR IGNORE INTO evaluations ({', '.join(_COLUMNS)}) VALUES ({marks})",
                                   [r._values() for r in rows])
                    return db.total_changes - before
            except sqlite3.Error as e:
                raise StoreError(f"cannot write the knowledge store {self.path} ({e})") from None

    def clear(self, task: str | None = None) -> int:
        """Remove every row (task=None) or the rows of one task name; returns how many."""
        with self._lock:
            try:
                with self._write() as db:
                    cur = db.execute("DELETE FROM evaluations" + (" WHERE task = ?" if task else ""),
                                     (task,) if task else ())
                    return cur.rowcount
            except sqlite3.Error as e:
                raise StoreError(f"cannot write the knowledge store {self.path} ({e})") from None

    # ---- reading ----------------------------------------------------------------------------------
    def rows(self, **where: Any) -> list[EvaluationRow]:
        """Rows whose columns equal the given values (e.g. signature=..., gpu=..., region="all"), oldest first."""
        unknown = set(where) - set(_COLUMNS)
        if unknown:
            raise ValueError(f"not columns of the knowledge store: {sorted(unknown)}")
        clause = " AND ".join(f"{k} = ?" for k in where)
        sql = "SELECT * FROM evaluations" + (f" WHERE {clause}" if clause else "") + " ORDER BY id"
        with self._lock:
            try:
                return [EvaluationRow._from_db(r) for r in self._db.execute(sql, tuple(where.values()))]
            except sqlite3.Error as e:
                raise StoreError(f"cannot read the knowledge store {self.path} ({e})") from None

    def __iter__(self) -> Iterator[EvaluationRow]:
        return iter(self.rows())

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> KnowledgeStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
