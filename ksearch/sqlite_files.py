"""SQLite files that several ksearch processes open and write at once (the knowledge store, the baseline cache).

What both learnt the hard way, in one place:
- `opening_lock`: two connections switching a fresh file to WAL at once deadlock (each holds a shared lock and
  wants an exclusive one) and SQLite fails one at once instead of calling its busy handler; so openers take
  turns on an flock of a sidecar file `<file>.lock`. Writers already open never take it.
- `immediate`: every write is one IMMEDIATE transaction, so the write lock is taken at its start (waiting up to
  the busy timeout) and two writers never deadlock upgrading a read lock.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def opening_lock(path: Path) -> Iterator[None]:
    """An exclusive flock on `<file>.lock` for the length of opening a database file."""
    fd = os.open(path.parent / (path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextmanager
def immediate(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One IMMEDIATE transaction: committed when the block ends, rolled back when it raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


class NewerSchema(sqlite3.DatabaseError):
    """The file was written by a newer ksearch (its schema version is higher than this one knows)."""

    def __init__(self, found: int):
        super().__init__(f"schema {found}")
        self.found = found


def prepare(db: sqlite3.Connection, busy_timeout_s: float, schema: str, version: int) -> None:
    """WAL mode, the busy timeout and the schema (`;`-separated statements, idempotent), stamped `version`;
    call it inside `opening_lock`. Raises NewerSchema for a file a newer ksearch wrote."""
    db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    with immediate(db):
        found = db.execute("PRAGMA user_version").fetchone()[0]
        if found > version:
            raise NewerSchema(found)
        for statement in filter(str.strip, schema.split(";")):
            db.execute(statement)
        db.execute(f"PRAGMA user_version = {version}")
