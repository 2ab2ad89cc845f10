"""The run journal: append-only JSONL, one line per event, written before the event takes effect.

Resume replays it. The search is deterministic given the answers it received (model replies,
evaluations, baseline times), so a resumed run re-executes the same loop and, for every event that is
already in the journal, takes the recorded value instead of asking again and writes nothing. Once the
recorded events run out it continues live, appending. A mismatch (the run asks something other than
what was recorded, e.g. after changing an override that alters earlier steps) stops with an error.

Settings may change between segments of a run (`ksearch resume RUN_DIR search.max_rounds=200`): the
change is recorded as a "config" record at the point where the new segment went live. Replay hands
those records to `on_info` when it reaches them, so every segment is replayed under the settings it
ran with, and the live edge calls `on_live` once, where the caller records a change of settings.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable


class JournalDivergence(RuntimeError):
    """A resumed run no longer follows its journal."""


class JournalCorrupted(RuntimeError):
    """A line other than the last one does not parse: something other than a crash damaged the file."""


def read_journal(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Records and the byte length of the well-formed prefix.

    Only the LAST line may be bad (a crash while appending tears it, or leaves garbage after it): it
    never took effect, so it is dropped. A bad line with good lines after it means the file was damaged
    some other way; dropping it would silently lose what follows, so that is an error instead.
    """
    if not path.exists():
        return [], 0
    records, good = [], 0
    with path.open("rb") as f:
        lines = f.read().split(b"\n")
    # split leaves a final "" after the last newline; anything else there is an unterminated torn line
    body, tail = lines[:-1], lines[-1]
    for i, line in enumerate(body):
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict) or "kind" not in rec:
                raise ValueError("not a journal record")
        except ValueError:
            if i == len(body) - 1 and not tail:
                break                      # a garbled last line: dropped like a torn one
            raise JournalCorrupted(f"{path}: line {i + 1} of {len(body)} is not a journal record, and records "
                                   f"follow it; the file was damaged after it was written. Keep a copy, then "
                                   f"cut the file before that line to resume from there.") from None
        records.append(rec)
        good += len(line) + 1
    return records, good


class Journal:
    # Kinds whose values come from outside the deterministic loop; replay returns the recorded value.
    MEMO_KINDS = ("model", "evaluation", "baseline", "remeasure", "validate")   # [shapes] + validate
    # Kinds that inform rather than decide: replay hands them to `on_info` instead of matching them.
    INFO_KINDS = ("config", "model_failed")

    def __init__(self, path: Path, fsync: bool = True):
        self.path = path
        self.fsync = fsync
        self.recorded, good = read_journal(path)
        self.dropped_bytes = 0
        if path.exists() and path.stat().st_size != good:
            self.dropped_bytes = path.stat().st_size - good
            with path.open("r+b") as f:    # drop a line torn by a crash mid-write; it never took effect
                f.truncate(good)
        self.cursor = 0
        self.on_info: Callable[[dict[str, Any]], None] | None = None
        self.on_live: Callable[[], None] | None = None
        self._went_live = False
        self._f = path.open("a", encoding="utf-8")

    @property
    def replaying(self) -> bool:
        self._consume_config_records()
        return self.cursor < len(self.recorded)

    def _consume_config_records(self) -> None:
        while self.cursor < len(self.recorded) and self.recorded[self.cursor].get("kind") in self.INFO_KINDS:
            rec = self.recorded[self.cursor]
            self.cursor += 1
            if self.on_info is not None:
                self.on_info(rec)

    def go_live(self) -> None:
        """Mark the live edge (once): `on_live` runs before anything new is written."""
        if not self._went_live:
            self._went_live = True
            if self.on_live is not None:
                self.on_live()

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
        self.go_live()
        rec = {"seq": self.cursor, "kind": kind, "t": time.time(), **check, **payload}
        self.cursor += 1
        self._append(rec)
        return rec

    def record_info(self, kind: str, **payload: Any) -> dict[str, Any]:
        """Append an informational record at the live edge (never matched: replay feeds it to on_info)."""
        assert kind in self.INFO_KINDS and not self.replaying
        self._went_live = True
        rec = {"seq": self.cursor, "kind": kind, "t": time.time(), **payload}
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
        self.go_live()
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
