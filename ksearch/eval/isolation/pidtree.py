"""The processes of a candidate's PID namespace, listed from the judge's /proc: what the judge stops a candidate
by where it has no control group (ksearch.eval.isolation.stopping).

Why: where the fork server can make no control group (a container's read-only /sys/fs/cgroup: the GPU hosts),
the process group was all that was left, and a process the candidate starts may leave it (setsid, setpgid).
As root, though, every candidate is PID 2 of a PID namespace of its own (ksearch.eval.isolation.forkserver),
and nothing it starts can leave that: it has no capabilities, and seccomp kills unshare, setns and namespaced
clones. The namespace's processes are exactly the candidate and what descends from it or from the namespace's
init: a process whose parent ends is handed to the nearest subreaper above it inside the namespace, or to
the init.

How: both the candidate and the init are children of the fork server. `Tree.members` reads the fork server's
children (it has one thread), then walks down from those of the two it lists, reading for every thread of
every process found /proc/<pid>/task/<tid>/children (a child made by a thread other than the main one is
listed under that thread; the file needs CONFIG_PROC_CHILDREN, see `available`). The init itself is trusted
and must keep the namespace: it is never a member, only what descends from it is. A root is walked only while the fork
server lists it as its child, so a candidate that ended and was reaped does not lead the walk to whoever got
its pid later. `stopping` confirms every pid by the next walk, as it does with a control group's listing.
The exec'd init (setpriv running sleep) reaps nothing: a process handed to it stays there as a zombie once it exits, until
the namespace ends, and the walk lists it (stopping it does nothing; each costs a read a walk).

Cost: the stop after a reply is inside the judge's clock. A /proc file opened once keeps naming the thread
it was opened for, and reading it again from offset 0 (pread) costs a tenth of open, read and close, so the
walk keeps each thread's children file open between walks (with its comm file, up to KEEP threads a tree,
and in all trees together a quarter of the judge's descriptor limit: the judge must not run out of them).
A kept file goes stale when its thread ends, and another thread of the same process may get its tid; that
takes the host's pids to come round once (tens of thousands of forks), never within FRESH_S. A kept file
checked less than FRESH_S ago is read as it is (the stop's second walk, microseconds after its first);
otherwise its comm is read too, which fails once the thread has ended, and a stale one is opened again by
path. The list of a process's threads is read by path every walk.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass

KEEP = 32                  # threads whose files a tree keeps open (two descriptors each)
FRESH_S = 0.001            # how long a kept file checked to name a live thread is read unchecked
_CHUNK = 1 << 16
_SOFT = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
# threads whose files all trees keep open together: a quarter of the descriptor limit, two a thread
KEEP_ALL = (_SOFT if _SOFT != resource.RLIM_INFINITY else 1 << 16) // 8


@dataclass(frozen=True)
class Namespace:
    """A candidate's PID namespace as the judge's /proc names it: its init and the fork server that started
    both the init and the candidate."""

    init: int
    parent: int


def available(pid: int) -> bool:
    """Whether the kernel lists a thread's children in /proc (CONFIG_PROC_CHILDREN), judged by `pid`'s."""
    return os.path.exists(f"/proc/{pid}/task/{pid}/children")


def pids(data: bytes) -> list[int]:
    """The pids of a /proc or cgroup listing ([] if it is not one)."""
    try:
        return [int(p) for p in data.split()]
    except ValueError:
        return []


def read_whole(path: str) -> bytes:
    """A whole /proc or cgroup file by path (b"" when it is gone). A bare os.read: a file object costs about
    5 µs more, and the judge's stop after a reply reads these inside its clock."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        chunks = []
        while chunk := os.read(fd, _CHUNK):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _pread(fd: int) -> bytes:
    """A kept /proc file read again from its start (it is generated anew at offset 0)."""
    data = os.pread(fd, _CHUNK, 0)
    if len(data) < _CHUNK:
        return data
    chunks = [data]
    while chunk := os.pread(fd, _CHUNK, sum(map(len, chunks))):
        chunks.append(chunk)
    return b"".join(chunks)


@dataclass
class _Kept:
    """One thread's open children and comm files, and when they were last seen to name a live thread."""

    children: int
    comm: int
    checked: float


class Tree:
    """Every process of one candidate's PID namespace but its init; `members` lists them now."""

    kept_all = 0                   # threads whose files all trees of this process keep open

    def __init__(self, namespace: Namespace, candidate: int):
        self.namespace, self.candidate = namespace, candidate
        self._kept: dict[tuple[int, int], _Kept] = {}        # by (pid, tid)
        self._now = 0.0                # when this walk started
        self._swept = False            # this walk has closed the kept files of ended threads already
        self._parent = _open(f"/proc/{namespace.parent}/task/{namespace.parent}/children")

    def members(self) -> set[int]:
        """The pids of the candidate's processes, in the judge's PID namespace, as the walk found them."""
        ns = self.namespace
        self._now, self._swept = time.monotonic(), False
        try:
            roots = set(pids(_pread(self._parent))) if self._parent >= 0 else set()
        except OSError:
            roots = set()
        todo = self._children(ns.init, ns.init) if ns.init in roots else []
        if self.candidate in roots:
            todo.append(self.candidate)
        found: set[int] = set()
        while todo:
            pid = todo.pop()
            if pid in found or pid == ns.init:
                continue
            found.add(pid)
            for tid in _threads(pid):
                todo.extend(self._children(pid, tid))
        return found

    def _children(self, pid: int, tid: int) -> list[int]:
        """The children of one thread, through its kept files where it has them (opened now if there is room)."""
        kept = self._kept.get((pid, tid))
        if kept is not None:
            try:
                data = _pread(kept.children)
                if self._now - kept.checked > FRESH_S:
                    os.pread(kept.comm, 64, 0)          # fails once the thread the files name has ended
                    kept.checked = self._now
                return pids(data)
            except OSError:
                self._close((pid, tid))                 # stale: its tid may be another thread's now
        if len(self._kept) >= KEEP and not self._swept:
            self._close_ended()
            self._swept = True
        if len(self._kept) < KEEP and Tree.kept_all < KEEP_ALL:
            children = _open(f"/proc/{pid}/task/{tid}/children")
            comm = _open(f"/proc/{pid}/task/{tid}/comm") if children >= 0 else -1
            if comm >= 0:
                self._kept[(pid, tid)] = _Kept(children, comm, self._now)
                Tree.kept_all += 1
                try:
                    return pids(_pread(children))
                except OSError:
                    return []
            if children >= 0:
                os.close(children)
        return pids(read_whole(f"/proc/{pid}/task/{tid}/children"))

    def _close_ended(self) -> None:
        """Close the kept files of threads that have ended (their slots go to live ones)."""
        for key, kept in list(self._kept.items()):
            try:
                os.pread(kept.comm, 64, 0)
            except OSError:
                self._close(key)

    def _close(self, key: tuple[int, int]) -> None:
        kept = self._kept.pop(key)
        Tree.kept_all -= 1
        os.close(kept.children)
        os.close(kept.comm)

    def close(self) -> None:
        """Close every kept descriptor (the candidate has ended)."""
        for key in list(self._kept):
            self._close(key)
        if self._parent >= 0:
            os.close(self._parent)
            self._parent = -1


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1


def _threads(pid: int) -> list[int]:
    """A process's thread ids, by path (always the current holder of `pid`; [] once it is gone)."""
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task".encode())]
    except (OSError, ValueError):
        return []
