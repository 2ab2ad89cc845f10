"""One writer per run directory: an exclusive flock on RUN/.lock for as long as a process writes there.

Two processes appending to one journal interleave their records, and the run can no longer be replayed.
`ksearch run`, `resume`, every sweep arm and a fork's new run therefore take this lock before they write
anything, and a second process is refused with the holder's pid, host and command. The kernel drops an
flock when its holder dies, however it dies (SIGKILL included), so a stale lock file never blocks a
resume; the file keeps the last holder's identity, which is how `show` names the writer that ended.

Readers (`show`, `show --live`) only probe: they open the file read-only, try a non-blocking shared
lock and release it at once. They never create or change anything in the run directory.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

LOCK_NAME = ".lock"

#: How long a writer keeps retrying a lock that is taken. A reader's probe holds a shared lock for
#: microseconds; a short retry keeps such a probe from being mistaken for a second writer.
ACQUIRE_GRACE_S = 1.0


#: Descriptors of the locks this process holds. A child forked without exec (exec closes them: O_CLOEXEC)
#: would share each lock, keeping the run "live" after this process died; the child closes its copies.
_HELD_FDS: set[int] = set()


def _close_inherited_locks() -> None:
    for fd in list(_HELD_FDS):
        try:
            os.close(fd)        # never LOCK_UN here: that would unlock the parent's lock as well
        except OSError:
            pass
    _HELD_FDS.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


class RunLocked(FileExistsError):
    """Another live process writes this run directory (a refusal: the CLI prints it and exits with 2)."""


@dataclass(frozen=True)
class Holder:
    """Who took the lock: written into the lock file when it is taken, left there when it is released."""

    pid: int | None
    host: str
    command: str
    started: float | None

    def describe(self) -> str:
        where = f"pid {self.pid}" if self.pid is not None else "an unknown pid"
        if self.host:
            where += f" on {self.host}"
        parts = [where]
        if self.command:
            parts.append(f"`{self.command}`")
        if self.started is not None:
            parts.append(f"since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.started))}")
        return ", ".join(parts)


@dataclass(frozen=True)
class WriterState:
    """Whether a process writes the run now, and who that is (or who wrote it last)."""

    live: bool
    holder: Holder | None


def lock_path(run_dir: Path) -> Path:
    return Path(run_dir) / LOCK_NAME


def probe(run_dir: str | Path) -> WriterState:
    """Is a writer alive in `run_dir`? Read-only: a missing lock file means no writer, and nothing is made."""
    path = lock_path(Path(run_dir))
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return WriterState(False, None)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            return WriterState(True, _read_holder(fd))
        fcntl.flock(fd, fcntl.LOCK_UN)
        return WriterState(False, _read_holder(fd))
    finally:
        os.close(fd)


class RunLock:
    """Exclusive, process-lifetime lock on a run directory; use as a context manager.

    `create_dir` makes the run directory first (a fresh run); otherwise it must exist. `before_claim`
    runs once the lock is held but before anything is written, so a refusal there (e.g. "this folder
    already holds a run") leaves the directory exactly as it was.
    """

    def __init__(self, run_dir: str | Path, *, command: str | None = None, create_dir: bool = False,
                 before_claim: Callable[[], None] | None = None):
        self.run_dir = Path(run_dir)
        self.command = command if command is not None else _own_command()
        self.create_dir = create_dir
        self.before_claim = before_claim
        self._fd: int | None = None
        self._made_dir = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> RunLock:
        if self.create_dir and not self.run_dir.exists():
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._made_dir = True
        fd = os.open(lock_path(self.run_dir), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            self._lock(fd)
            if self.before_claim is not None:
                self.before_claim()
            me = Holder(os.getpid(), socket.gethostname(), self.command, time.time())
            data = (json.dumps(me.__dict__) + "\n").encode()
            # one write over the old identity (padded with JSON whitespace to cover it), then the length:
            # a reader sees the old holder or the new one, never an empty file
            os.pwrite(fd, data.ljust(os.fstat(fd).st_size), 0)
            os.ftruncate(fd, len(data))
        except BaseException:
            if self._made_dir:
                self._remove_if_untouched()
            os.close(fd)          # closing the descriptor drops the lock, if it was taken
            raise
        self._fd = fd
        _HELD_FDS.add(fd)
        return self

    def _lock(self, fd: int) -> None:
        deadline = time.monotonic() + ACQUIRE_GRACE_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as e:
                if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        holder = _read_holder(fd)
        who = holder.describe() if holder else "a process that is still starting"
        pid = holder.pid if holder and holder.pid is not None else "PID"
        raise RunLocked(f"{self.run_dir} is being written by another ksearch process ({who}); one writer per run "
                        f"directory: wait for it to end, or stop it (`kill {pid}`) and resume")

    def release(self) -> None:
        """Drop the lock. The file stays, naming this process as the last writer."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            _HELD_FDS.discard(fd)
            os.close(fd)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, exc_type: object, *_: object) -> None:
        if exc_type is not None and self._made_dir:
            self._remove_if_untouched()
        self.release()

    def _remove_if_untouched(self) -> None:
        """A fresh run that failed before writing anything leaves no folder behind, only its error."""
        try:
            if [p.name for p in self.run_dir.iterdir()] == [LOCK_NAME]:
                lock_path(self.run_dir).unlink()
                self.run_dir.rmdir()
        except OSError:
            pass


def _read_holder(fd: int, tries: int = 5) -> Holder | None:
    """The identity in the lock file, or None when it is empty or unreadable (a lock file is never trusted).

    A read that overlaps a writer's claim can see half of the new identity and half of the old one; such
    a read is retried a few times, since the claim takes microseconds.
    """
    d = None
    for attempt in range(tries):
        try:
            d = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace") or "null")
            break
        except (OSError, ValueError):
            time.sleep(0.005 * (attempt + 1))
    if not isinstance(d, dict):
        return None
    pid = d.get("pid")
    started = d.get("started")
    return Holder(pid if isinstance(pid, int) else None, str(d.get("host") or ""), str(d.get("command") or "")[:200],
                  float(started) if isinstance(started, (int, float)) else None)


def _own_command() -> str:
    """This process's command line as a user would type it, e.g. `ksearch resume runs/x` (shortened)."""
    argv = list(sys.argv) or ["?"]
    ours = argv[0].endswith(("cli.py", "ksearch", "__main__.py"))
    text = " ".join(["ksearch" if ours else os.path.basename(argv[0]), *argv[1:]])
    return text if len(text) <= 120 else text[:117] + "..."
