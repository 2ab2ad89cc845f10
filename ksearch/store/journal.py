"""The run journal: append-only JSONL, one line per event, written before the event takes effect.

Resume replays it. The search is deterministic given the answers it received (model replies,
evaluations, baseline times), so a resumed run re-executes the same loop and, for every event that is
already in the journal, takes the recorded value instead of asking again and writes nothing. Once the
recorded events run out it continues live, appending. A mismatch (the run asks something other than
what was recorded, e.g. after changing an override that alters earlier steps) stops with an error.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable


class JournalDivergence(RuntimeError):
    """A resumed run no longer follows its journal."""


def read_journal(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Records and the byte length of the well-formed prefix (a torn last line is dropped)."""
    if not path.exists():
        return [], 0
    records, good = [], 0
    with path.open("rb") as f:
        for line in f:
            if not line.endswith(b"\n"):
                break
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
            good += len(line)
    return records, good


class Journal:
    # Kinds whose values come from outside the deterministic loop; replay returns the recorded value.
    MEMO_KINDS = ("model", "evaluation", "baseline")

    def __init__(self, path: Path, fsync: bool = True):
        self.path = path
        self.fsync = fsync
        self.recorded, good = read_journal(path)
        if path.exists() and path.stat().st_size != good:
            with path.open("r+b") as f:    # drop a line torn by a crash mid-write; it never took effect
                f.truncate(good)
        self.cursor = 0
        self._f = path.open("a", encoding="utf-8")

    @property
    def replaying(self) -> bool:
        return self.cursor < len(self.recorded)

    def close(self) -> None:
        self._f.close()

    def _append(self, record: dict[str, Any]) -> None:
        self._f.write(json.dumps(record, default=str, separators=(",", ":")) + "\n")
        self._f.flush()
        if self.fsync:
            os.fsync(self._f.fileno())

    def event(self, kind: str, check: dict[str, Any] | None = None, **payload: Any) -> dict[str, Any]:
        """Record a derived event; in replay, confirm it matches the journal instead of writing it."""
        check = check or {}
        if self.replaying:
            rec = self.recorded[self.cursor]
            self._expect(rec, kind, check)
            self.cursor += 1
            return rec
        rec = {"seq": self.cursor, "kind": kind, "t": time.time(), **check, **payload}
        self.cursor += 1
        self._append(rec)
        return rec

    def memo(self, kind: str, key: str, compute: Callable[[], dict[str, Any]], **meta: Any) -> dict[str, Any]:
        """The recorded value for this (kind, key) in replay; else compute it, record it, return it."""
        assert kind in self.MEMO_KINDS
        if self.replaying:
            rec = self.recorded[self.cursor]
            self._expect(rec, kind, {"key": key})
            self.cursor += 1
            return rec["value"]
        value = compute()
        rec = {"seq": self.cursor, "kind": kind, "t": time.time(), "key": key, **meta, "value": value}
        self.cursor += 1
        self._append(rec)
        return value

    def _expect(self, rec: dict[str, Any], kind: str, check: dict[str, Any]) -> None:
        if rec.get("kind") != kind or any(rec.get(k) != v for k, v in check.items()):
            got = {k: rec.get(k) for k in ["kind", *check]}
            want = {"kind": kind, **check}
            raise JournalDivergence(
                f"{self.path}: event {self.cursor} is {got} but the resumed run produced {want}. The settings "
                f"or the code changed how the run behaves before this point; resume with the original settings "
                f"or start a new run.")
