"""A control group per candidate: host memory and tasks the kernel charges to the candidate, whatever it holds them in.

Why: the address-space cap (RLIMIT_AS) sees only what a process maps. Pages of an anonymous file it never
maps (os.memfd_create and os.posix_fallocate: plain Python, no audit event), its tmpfs scratch and System V
segments are host memory outside that cap, and the OOM killer does not count them against the process: it
would pick the judge instead. Threads and processes draw on the host's one table of PIDs (pid_max is often
32768): a candidate that starts them with small stacks would leave none for the judge or anyone else. A
control group counts both for the candidate, every process it starts included, and the kernel enforces the
limits: past memory.max the candidate is OOM-killed inside its group; past pids.max a fork or a new thread
fails in the candidate alone. The group also lists every process the candidate started, whatever it did to
its session or process group: the judge stops and continues the candidate by it (ksearch.eval.isolation.stopping).

How: the fork server (ksearch.eval.isolation.forkserver) probes once which hierarchies it may write (`probe`):
cgroup v1's memory and pids hierarchies, or cgroup v2 where its own group delegates both controllers. Per
child it makes one group in each (`make`, named after the fork server and the child), the child joins them
first thing in its walls, while it is still root (`join`), and the fork server removes them once the child
and its namespace are gone (`remove`). Where no hierarchy is writable (a container's read-only /sys/fs/cgroup,
not root), the walls' description says so and these limits are missing: memory then has only the address-space
cap (CPU), tasks no limit, and the judge stops the candidate by its PID namespace's process tree where it has
one (ksearch.eval.isolation.pidtree), else by its process group, which its processes can leave.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

PIDS_MAX = 4096             # tasks (threads and processes) per candidate: torch, Triton and CUDA use tens
PREFIX = "ksearch_"


@dataclass(frozen=True)
class Hierarchy:
    """One folder candidates' groups are made in, and what each group is given there."""

    folder: str
    settings: tuple[tuple[str, str], ...]       # (control file, value)


@dataclass(frozen=True)
class CgroupPlan:
    hierarchies: tuple[Hierarchy, ...]
    memory_bytes: int | None
    pids: int

    def describe(self) -> str:
        memory = f"memory {self.memory_bytes >> 20} MiB, " if self.memory_bytes else ""
        return f"a control group of its own ({memory}{self.pids} tasks)"

    def groups(self, name: str) -> tuple[str, ...]:
        return tuple(os.path.join(h.folder, name) for h in self.hierarchies)


def _own_groups() -> dict[str, str]:
    """{controller (or "" for cgroup v2): this process's group path}, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    return out


def _mounts() -> dict[str, str]:
    """{controller (or "" for cgroup v2): its mount point}, from /proc/self/mountinfo."""
    out: dict[str, str] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype, _, options = (right.split() + ["", "", ""])[:3]
            point = left.split()[4].encode().decode("unicode_escape")
            if fstype == "cgroup2":
                out.setdefault("", point)
            elif fstype == "cgroup":
                for c in ("memory", "pids"):
                    if c in options.split(","):
                        out.setdefault(c, point)
    return out


def _hierarchies(memory_bytes: int | None, pids: int) -> tuple[list[Hierarchy], str]:
    """Where groups with these limits can be made (cgroup v1 preferred per controller), or why not."""
    mounts, own = _mounts(), _own_groups()
    limits = {"pids": [("pids.max", str(pids))]}
    if memory_bytes:
        limits["memory"] = [("memory.limit_in_bytes", str(memory_bytes))]
    out, missing = [], []
    for controller, settings in limits.items():
        if controller in mounts and controller in own:
            out.append(Hierarchy(os.path.join(mounts[controller], own[controller].lstrip("/")), tuple(settings)))
        else:
            missing.append(controller)
    if missing and "" in mounts and "" in own:
        folder = os.path.join(mounts[""], own[""].lstrip("/"))
        try:
            with open(os.path.join(folder, "cgroup.subtree_control")) as f:
                delegated = f.read().split()
        except OSError:
            delegated = []
        if all(c in delegated for c in missing):
            v2 = {**limits, "memory": [("memory.max", str(memory_bytes))]}      # v1's memory file is named otherwise
            out.append(Hierarchy(folder, tuple(s for c in missing for s in v2[c])))
            missing = []
    why = f"no writable cgroup hierarchy for {', '.join(missing)}" if missing else ""
    return out, why


def make(plan: CgroupPlan, name: str) -> tuple[str, ...]:
    """The groups of one child, made and limited (the fork server calls this before it forks the child)."""
    made: list[str] = []
    try:
        for h, group in zip(plan.hierarchies, plan.groups(name)):
            os.mkdir(group, 0o755)
            made.append(group)
            for control, value in h.settings:
                with open(os.path.join(group, control), "w") as f:
                    f.write(value)
    except OSError:
        remove(tuple(made))
        raise
    return tuple(made)


def join(groups: tuple[str, ...]) -> None:
    """Move this (single-threaded, freshly forked) process into `groups`; what it starts later stays there."""
    for group in groups:
        with open(os.path.join(group, "cgroup.procs"), "w") as f:
            f.write("0")


def remove(groups: tuple[str, ...]) -> None:
    """Remove the groups of a child whose processes are all gone (a group still in use stays)."""
    for group in groups:
        try:
            os.rmdir(group)
        except OSError:
            pass


def remove_stale(plan: CgroupPlan, alive: Callable[[int], bool]) -> None:
    """Groups a killed fork server left behind (named after its pid): removed when that process is gone."""
    for h in plan.hierarchies:
        try:
            names = os.listdir(h.folder)
        except OSError:
            continue
        for name in names:
            owner = name[len(PREFIX):].split("_", 1)[0] if name.startswith(PREFIX) else ""
            if owner.isdigit() and not alive(int(owner)):
                remove((os.path.join(h.folder, name),))


def probe(memory_bytes: int | None, pids: int = PIDS_MAX) -> tuple[CgroupPlan | None, str]:
    """The plan this process (the fork server, root) can carry out, tried once in a throwaway child; or why not."""
    if os.geteuid() != 0:
        return None, "no control groups (not root)"
    try:
        found, why = _hierarchies(memory_bytes, pids)
    except OSError as e:
        return None, f"no control groups ({e})"
    if why:
        return None, why
    plan = CgroupPlan(tuple(found), memory_bytes, pids)
    try:
        groups = make(plan, f"{PREFIX}{os.getpid()}_probe")
    except OSError as e:
        return None, f"no control groups ({e.strerror or e})"
    try:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                join(groups)
                code = 0
            finally:
                os._exit(code)
        ok = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
    finally:
        remove(groups)
    return (plan, "") if ok else (None, "no control groups (a child could not join one)")

