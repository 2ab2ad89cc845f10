"""Stopping a candidate and every process it started, by its control group (else its PID namespace), and
continuing exactly those.

Why: the judge stops the other candidates of a job while one is timed, and the timed one from its reply until
it has read what it verifies. A process group cannot hold them: a process the candidate starts may call setsid
or setpgid (they stay allowed, ninja puts every compile step in a group of its own) and keep running while its
group is stopped. The candidate's control group (ksearch.eval.isolation.cgroups) holds every process it starts,
whatever it does to process groups or sessions: it runs without capabilities as an unprivileged uid, and the
group's files are not its to write.

How: `stop` reads the group's cgroup.procs (pids in the reader's PID namespace: the judge and the fork server
share one), opens a pidfd for each pid it has not seen, reads cgroup.procs again and sends SIGSTOP through the
pidfds whose pid is still listed. A pid whose process ended and whose number went to a process outside the
group before its pidfd was opened is then no longer listed, and is never signalled; a pidfd keeps naming the
process it was opened for, so a signal through it never reaches a later holder of the number. The second
read also shows the processes started meanwhile: the loop ends when a read shows no new pid (a stopped
process starts no more; pids.max and MAX_ROUNDS bound it). A signal takes effect when its target next leaves
the kernel, so a fork in progress completes first and its child is listed only then: `Stopped.settle` waits
until every thread of every listed process is in fact stopped, stopping what appeared meanwhile and again
anything a not-yet-stopped process of the group continued. `Stopped.resume` sends SIGCONT through the same
pidfds, continuing exactly what was stopped, and closes them. The judge keeps at most KEEP pidfds per group
(a candidate with thousands of processes must not use up its descriptors): past those, a process is
continued by its pid, which stays its own while it is stopped unless it is killed meanwhile.

Why signals and not the freezer: cgroup v2's cgroup.freeze (v1's freezer.state) also stops every process,
forks in progress included, but it is asynchronous: the judge would learn that the group is frozen only by
polling cgroup.events (v1: freezer.state) until it says so, and the stop after a reply is inside the judge's
clock. The signals cost a few reads of a small file and one system call per process; the waiting
(`settle`) can come after the clock has stopped. cgroup v1's freezer is also a hierarchy of its own, which
the fork server would have to make groups in as well.

Where a candidate has no control group (no hierarchy is writable, as in the GPU hosts' containers) but a PID
namespace of its own (the fork server is root), the same loop reads the namespace's process tree instead of
cgroup.procs (ksearch.eval.isolation.pidtree): `holder_for` picks what holds the candidate. Where it has
neither (the fork server is not root), or the kernel does not list a thread's children in /proc, the judge
falls back to its process group, which a process the candidate starts can leave (`fallback`).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ksearch.eval.isolation import pidtree

MAX_ROUNDS = 64            # listings (cgroup.procs, the tree) in one stop; each stops what it found new (up to BATCH)
BATCH = 256                # pidfds open at once while a round confirms them
KEEP = 32                  # pidfds kept per candidate until resume; beyond, a stopped process is continued by pid
SETTLE_S = 0.05            # how long settle waits for the signals to land (a thread in the kernel may take a while)
_STOPPED_STATES = frozenset(b"tTZX")      # stopped, traced (also held), or gone


def _procs(group: str) -> set[int]:
    """The pids listed in a group's cgroup.procs (empty once the group is gone)."""
    return set(pidtree.pids(pidtree.read_whole(group + "/cgroup.procs")))


class Holder(Protocol):
    """What holds every process of a candidate, whatever it does to its session or process group."""

    def members(self) -> set[int]:
        """The pids of its processes now (in the reader's PID namespace)."""
        ...

    def close(self) -> None:
        """Let go of what listing them kept (the candidate has ended)."""
        ...


@dataclass(frozen=True)
class ControlGroup:
    """A candidate's control group (the first of its hierarchies: they all hold the same processes)."""

    path: str

    def members(self) -> set[int]:
        return _procs(self.path)

    def close(self) -> None:
        pass


def holder_for(groups: Sequence[str], namespace: pidtree.Namespace | None, pid: int | None) -> Holder | None:
    """What the judge stops a candidate by: its control group, else its PID namespace's process tree (where
    the kernel lists threads' children), else None (its process group, which its processes can leave)."""
    if groups:
        return ControlGroup(groups[0])
    if namespace is not None and pid and pidtree.available(namespace.init):
        return pidtree.Tree(namespace, pid)
    return None


def fallback(namespaces: bool) -> str:
    """How the judge stops a candidate that has no control group, for the walls' description."""
    if namespaces and pidtree.available(os.getpid()):
        return "the judge stops a candidate by its PID namespace's process tree"
    why = " (no /proc/PID/task/TID/children here: CONFIG_PROC_CHILDREN is off)" if namespaces else ""
    return f"the judge stops a candidate by its process group, which its processes can leave{why}"


def _send(pid: int, fd: int, sig: int) -> bool:
    """Signal one process through its pidfd (by pid where no pidfd could be opened); False if it is gone."""
    try:
        if fd >= 0:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
        return True
    except OSError:
        return False


def _threads_stopped(pid: int) -> bool:
    """Whether every thread of `pid` is stopped (or the process is gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                state = f.read().rpartition(b")")[2].split()[0]
        except (OSError, IndexError):
            continue                              # that thread has ended
        if state[0] not in _STOPPED_STATES:
            return False
    return True


@dataclass
class Stopped:
    """The processes of one candidate that `stop` stopped: {pid: pidfd (-1: signalled by pid)}."""

    holder: Holder
    fds: dict[int, int] = field(default_factory=dict)
    kept: int = 0                  # how many of fds are open pidfds

    def _stop_new(self, listed: set[int]) -> set[int]:
        """Stop the processes in `listed` not stopped yet, as the module says; returns the holder's last listing."""
        for _ in range(MAX_ROUNDS):
            new = sorted(listed - self.fds.keys())[:BATCH]
            if not new:
                break
            opened: dict[int, int] = {}
            for pid in new:
                try:
                    opened[pid] = os.pidfd_open(pid)
                except ProcessLookupError:
                    continue                          # gone already
                except OSError:
                    opened[pid] = -1                  # no pidfd (out of descriptors): by pid, checked the same way
            listed = self.holder.members()
            for pid, fd in opened.items():
                if pid in listed and _send(pid, fd, signal.SIGSTOP):
                    if fd >= 0 and self.kept >= KEEP:     # a candidate with hundreds of processes must not use
                        os.close(fd)                      # up the judge's descriptors: a stopped process keeps
                        fd = -1                           # its pid until it is continued (or killed)
                    self.fds[pid] = fd
                    self.kept += fd >= 0
                elif fd >= 0:
                    os.close(fd)
        return listed            # after MAX_ROUNDS, still with new pids: settle goes on

    def settle(self, timeout: float = SETTLE_S) -> bool:
        """Wait until every process of the candidate is stopped, stopping any that appeared (a fork in progress when
        it was signalled) or was continued by one not yet stopped. False if some still ran at `timeout` (a thread
        that stays in the kernel, uninterruptibly, stops only when it leaves)."""
        deadline = time.monotonic() + timeout
        pause = 0.0
        while True:
            listed = self._stop_new(self.holder.members())
            running = [pid for pid in listed if pid in self.fds and not _threads_stopped(pid)]
            # Listed again only once all were seen stopped: a fork that was under way when `listed` was read
            # has attached its child by the time its parent stops, and a stopped process starts no other.
            if not running and not listed - self.fds.keys() and not self.holder.members() - self.fds.keys():
                return True
            if time.monotonic() > deadline:
                return False
            for pid in running:          # continued by a process not stopped yet, or its pid is another's now
                if not _send(pid, self.fds[pid], signal.SIGSTOP):
                    self._forget(pid)
            time.sleep(pause)
            pause = min(0.002, pause + 0.0002)

    def _forget(self, pid: int) -> None:
        """A stopped process is gone: its pid, if listed again, is a new process to stop."""
        fd = self.fds.pop(pid)
        if fd >= 0:
            os.close(fd)
            self.kept -= 1

    def resume(self) -> None:
        """SIGCONT every process this stopped (through the pidfds it stopped them by), and close the pidfds."""
        fds, self.fds, self.kept = self.fds, {}, 0
        for pid, fd in fds.items():
            _send(pid, fd, signal.SIGCONT)
            if fd >= 0:
                os.close(fd)


def stop(holder: Holder) -> Stopped:
    """SIGSTOP every process `holder` lists (a candidate's control group or PID namespace, `holder_for`).
    Cheap: a few listings and a signal per process; call `settle` (outside any clock) to be sure they all have
    stopped, and `resume` to continue them."""
    held = Stopped(holder)
    held._stop_new(holder.members())
    return held
