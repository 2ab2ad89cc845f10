"""The run journal: append-only JSONL, one typed record per line, written before the event takes effect.

Every line is a record of store/records.py: the owner's decisions are appended with `append`, answers
from outside the loop (model replies, measurements) with `memo`, and every reader decodes the lines with
`read_records`. Resume replays it. The search is deterministic given the answers it received (model
replies, evaluations, baseline times), so a resumed run re-executes the same loop and, for every record
that is already in the journal, takes the recorded value instead of asking again and writes nothing.
Once the recorded records run out it continues live, appending. A mismatch (the run decides something
other than what was recorded, e.g. after changing an override that alters earlier steps) stops with an
error.

Settings may change between segments of a run (`ksearch resume RUN_DIR search.max_rounds=200`): the
change is recorded as a "config" record at the point where the new segment went live. Replay hands
those records to `on_info` when it reaches them, so every segment is replayed under the settings it
ran with, and the live edge calls `on_live` once, where the caller records a change of settings.

Parallel runs: the owner of the search writes its records in a deterministic order (matched in order on
replay, as above), while the work of an action cycle (its code requests and evaluations) is recorded by
the cycle's own thread whenever it finishes. Those records carry the cycle they belong to, and replay
matches them by (kind, cycle, key), never by position: a resumed run finds every answer a cycle got
before the kill, whatever the interleaving was, and asks again only what was never recorded.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ksearch.store.records import Record, Role, decode

A = TypeVar("A", bound=Record)


class JournalDivergence(RuntimeError):
    """A resumed run no longer follows its journal."""


class JournalCorrupted(RuntimeError):
    """A line other than the last one does not parse: something other than a crash damaged the file."""


def read_records(path: Path) -> tuple[list[Record], int]:
    """The typed records of a journal file and the byte length of its well-formed prefix.

    Only the LAST line may be bad (a crash while appending tears it, or leaves garbage after it): it
    never took effect, so it is dropped. A bad line with good lines after it means the file was damaged
    some other way; dropping it would silently lose what follows, so that is an error instead.
    """
    path = Path(path)
    if not path.exists():
        return [], 0
    records, good = [], 0
    with path.open("rb") as f:
        lines = f.read().split(b"\n")
    # split leaves a final "" after the last newline; anything else there is an unterminated torn line
    body, tail = lines[:-1], lines[-1]
    for i, line in enumerate(body):
        try:
            raw = json.loads(line)
            if not isinstance(raw, dict) or "kind" not in raw:
                raise ValueError("not a journal record")
        except ValueError:
            if i == len(body) - 1 and not tail:
                break                      # a garbled last line: dropped like a torn one
            raise JournalCorrupted(f"{path}: line {i + 1} of {len(body)} is not a journal record, and records "
                                   f"follow it; the file was damaged after it was written. Keep a copy, then "
                                   f"cut the file before that line to resume from there.") from None
        records.append(decode(raw))
        good += len(line) + 1
    return records, good


class Journal:
    def __init__(self, path: Path, fsync: bool = True):
        self.path = path
        self.fsync = fsync
        self.recorded, good = read_records(path)
        self.dropped_bytes = 0
        if path.exists() and path.stat().st_size != good:
            self.dropped_bytes = path.stat().st_size - good
            with path.open("r+b") as f:    # drop a line torn by a crash mid-write; it never took effect
                f.truncate(good)
        self.cursor = 0
        self._lock = threading.RLock()         # appends come from the owner and from cycle threads
        self._seq = len(self.recorded)         # the next record's position in the file
        self._by_cycle: dict[tuple[str, int, str], deque[Record]] = defaultdict(deque)
        for rec in self.recorded:
            if _cycle_keyed(rec):
                self._by_cycle[(rec.kind, int(rec.cycle), str(rec.key))].append(rec)  # type: ignore[attr-defined]
        self.on_info: Callable[[Record], None] | None = None
        self.on_live: Callable[[], None] | None = None
        self._went_live = False
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self._size = os.fstat(self._fd).st_size     # the end of the last whole record

    @property
    def replaying(self) -> bool:
        """Whether records remain that the owner must match in order (owner thread only)."""
        self._consume_config_records()
        return self.cursor < len(self.recorded)

    def _consume_config_records(self) -> None:
        """Step over records that are not matched in order: informational ones (handed to `on_info`) and
        those of a cycle's own work (matched by cycle instead, see memo)."""
        while self.cursor < len(self.recorded):
            rec = self.recorded[self.cursor]
            if _cycle_keyed(rec):
                self.cursor += 1
            elif rec.ROLE is Role.INFO:
                self.cursor += 1
                if self.on_info is not None:
                    self.on_info(rec)
            else:
                break

    def go_live(self) -> None:
        """Mark the live edge (once): `on_live` runs before anything new is written."""
        with self._lock:
            if not self._went_live:
                self._went_live = True
                if self.on_live is not None:
                    self.on_live()

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def _write(self, record: A) -> A:
        """Write one record with the next seq (seqs are the file's line numbers), whole or not at all.

        Unbuffered, so nothing is left in memory to be flushed half-way later; a short write is continued,
        and a failed one (a full disk) is cut off before it is raised. Appends come from the owner and from
        cycle threads, so the lock orders them.
        """
        with self._lock:
            if self._fd is None:
                raise ValueError(f"{self.path}: the journal is closed")
            record.seq, record.t = self._seq, time.time()
            line = (json.dumps(record.to_json(), default=str, separators=(",", ":")) + "\n").encode("utf-8")
            try:
                rest = memoryview(line)
                while rest:
                    rest = rest[os.write(self._fd, rest):]
                if self.fsync:
                    os.fsync(self._fd)
            except OSError as e:
                try:
                    os.ftruncate(self._fd, self._size)  # drop the partial line; freeing space cannot fail for lack of it
                except OSError:
                    pass                                # then resume drops it as a torn last line
                raise OSError(e.errno, e.strerror, str(self.path)) from None
            self._size += len(line)
            self._seq += 1
            return record

    def append(self, record: A) -> A:
        """Record one of the owner's decisions; in replay, confirm it matches the journal instead of writing
        it (the record comes back with the recorded seq and time). Informational records are never matched:
        the owner writes them at the live edge, a cycle's thread (a record with a `cycle`) whenever its
        work fails."""
        if record.ROLE is Role.INFO:
            return self._note(record)
        assert record.ROLE is Role.ORDERED, f"{record.kind} records are answers: Journal.memo writes them"
        if self.replaying:
            rec = self.recorded[self.cursor]
            self._expect(rec, record)
            self.cursor += 1
            record.seq, record.t = rec.seq, rec.t
            return record
        with self._lock:
            self.go_live()
            self.cursor += 1
            return self._write(record)

    def _note(self, record: A) -> A:
        with self._lock:
            if getattr(record, "cycle", None) is None:
                assert not self.replaying
                self._went_live = True
                self.cursor += 1
            return self._write(record)

    def memo(self, record: A, compute: Callable[[], dict[str, Any]]) -> A:
        """The recorded answer to `record`'s question (its kind and key) in replay; else `compute` it, record
        it and return the record with its value.

        With a `cycle`, the record belongs to that action cycle's work and is matched by (kind, cycle, key)
        wherever it is in the file; it may be called from the cycle's own thread."""
        assert record.ROLE is Role.ANSWER, f"{record.kind} records are not answers"
        key, cycle = str(record.key), getattr(record, "cycle", None)  # type: ignore[attr-defined]  # every Answer kind declares a key
        if cycle is not None:
            with self._lock:
                queue = self._by_cycle.get((record.kind, int(cycle), key))
                if queue:
                    return queue.popleft()  # type: ignore[return-value]
            # Not recorded: asked now. The live edge (and a change of settings) is the owner's to mark, at
            # its next record, so a cycle's thread never consumes the owner's records.
            record.value = compute()  # type: ignore[attr-defined]
            return self._write(record)
        if self.replaying:
            rec = self.recorded[self.cursor]
            self._expect(rec, record, ("key",))
            self.cursor += 1
            return rec  # type: ignore[return-value]
        self.go_live()
        record.value = compute()  # type: ignore[attr-defined]
        with self._lock:
            self.cursor += 1
            return self._write(record)

    def _expect(self, rec: Record, new: Record, fields: tuple[str, ...] | None = None) -> None:
        fields = new.checked_fields() if fields is None else fields
        if rec.kind != new.kind or any(getattr(rec, f, None) != getattr(new, f) for f in fields):
            names = {f: type(new)._json_name(f) for f in fields}
            got = {"kind": rec.kind, **{names[f]: getattr(rec, f, None) for f in fields}}
            want = {"kind": new.kind, **{names[f]: getattr(new, f) for f in fields}}
            raise JournalDivergence(
                f"{self.path}: event {self.cursor} is {got} but the resumed run produced {want}. The settings "
                f"or the code changed how the run behaves before this point; resume with the original settings "
                f"or start a new run.")


def _cycle_keyed(rec: Record) -> bool:
    """A record of a cycle's own work: matched by cycle on replay, not by position."""
    return rec.ROLE is Role.ANSWER and getattr(rec, "cycle", None) is not None
