"""Making sure no process outlives its evaluation: PID/network namespaces, or a child subreaper.

Two ways, picked per fork server (`isolation=`):

- "namespaces" (Linux, root or CAP_SYS_ADMIN; the default when the kernel allows it). Every candidate is
  PID 1 of a new PID namespace, and lives in a new network namespace. When PID 1 of a namespace exits, the
  kernel kills every other process in it and waits for them, whatever they did (setsid, double fork,
  ignoring signals): nothing can outlive the candidate. The new network namespace holds only a loopback
  interface that is down: no network at all, not even to localhost services of the host. The candidate
  also cannot see or signal any process outside its namespace (the judge included): where the kernel
  allows a new proc mount, the candidate gets a mount namespace with its own /proc, so /proc/PID of the
  judge (its memory, descriptors and namespaces) cannot even be named. Where it does not (some
  containers mask /proc), the audit hook still refuses Python opens of other processes' /proc entries,
  but native code could read the host's /proc.
- "subreaper" (the fallback when unshare is refused: not root, or a container that forbids it). The fork
  server marks itself a child subreaper (PR_SET_CHILD_SUBREAPER), so every orphan of a candidate is
  re-parented to it instead of to init, setsid and double forks included; when a candidate ends, the
  server kills and reaps every process it did not start itself, repeating until none is left.
  What is lost: there is no network isolation (the audit hook's socket refusals are the only barrier),
  the candidate sees and may signal every process of the user (the audit hook refuses os.kill from
  candidate code, but not from code it runs through ctypes or a toolchain binary), and if the fork server
  itself is killed, orphans then go to the next subreaper or to init and survive. Orphans of a candidate
  that is still running are swept when any other candidate of the same server ends.

All helpers are plain functions over pids and /proc so both modes and the tests share them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

_libc: ctypes.CDLL | None = None


def libc() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def _prctl(option: int, arg: int) -> None:
    if libc().prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send `sig` to this process when the thread that forked it exits."""
    _prctl(PR_SET_PDEATHSIG, int(sig))


def become_subreaper() -> None:
    """Orphans among this process's descendants are re-parented here rather than to init."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def unshare(flags: int) -> None:
    """unshare(2) through libc (os.unshare only exists from Python 3.12)."""
    if libc().unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")


def namespaces_available() -> tuple[bool, str]:
    """Whether new PID and network namespaces can be made here: probed in a throwaway child.

    The probe forks, so call it before threads exist (the fork server calls it first thing).
    """
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            unshare(CLONE_NEWPID | CLONE_NEWNET)
        except OSError as e:
            code = 10 + (e.errno or 0) % 100
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        return True, "PID and network namespaces"
    errno_ = code - 10 if code >= 10 else 0
    return False, f"unshare(CLONE_NEWPID|CLONE_NEWNET) refused ({os.strerror(errno_) if errno_ else code})"


MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18


def _mount(source: bytes | None, target: bytes, fstype: bytes | None, flags: int) -> None:
    mount = libc().mount
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    if mount(source, target, fstype, flags, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target.decode()}: {os.strerror(err)}")


def make_private_proc() -> None:
    """In a process that is in a new PID namespace: a mount namespace of its own with a /proc that shows
    only that namespace. Without it the host's /proc would name the judge's process, whose memory
    (/proc/PID/mem), descriptors (/proc/PID/fd) and namespaces (/proc/PID/ns, a way back to the network)
    root may open."""
    unshare(CLONE_NEWNS)
    _mount(None, b"/", None, MS_REC | MS_PRIVATE)        # our mounts must not propagate to the host
    _mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def private_proc_available() -> bool:
    """Probe make_private_proc() in a throwaway PID namespace (containers may refuse a new proc mount)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            unshare(CLONE_NEWPID)
            inner = os.fork()
            if inner == 0:
                try:
                    make_private_proc()
                    os._exit(0 if os.readlink("/proc/self") == "1" else 1)
                except BaseException:  # noqa: BLE001 - the forked probe must exit, never unwind into the parent's code
                    os._exit(1)
            code = os.waitstatus_to_exitcode(os.waitpid(inner, 0)[1])
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAP_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Give up every capability, for this process and anything it execs; set no_new_privs.

    The process keeps its uid (root stays the owner of root's files, so this is no barrier to writing
    them), but loses what lets root leave a namespace or reach the kernel: mount, unshare/setns,
    ptrace of others, raw network, module loading, reading files it does not own. The bounding set is
    emptied first, so a toolchain binary exec'd later does not get root's capabilities back.
    """
    try:
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        libc().prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)      # EINVAL for caps this kernel lacks: fine
    libc().prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_CAP_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc().capset(ctypes.byref(header), ctypes.byref(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def children_of(pid: int) -> list[int]:
    """Direct children of `pid`, from /proc/<pid>/task/*/children (empty if it is gone)."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/children").read_text()
        except OSError:
            continue
        out.extend(int(p) for p in text.split())
    return out


def descendants(pid: int) -> list[int]:
    """Every descendant of `pid`, parents before their children."""
    seen: list[int] = []
    stack = children_of(pid)
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.append(p)
        stack.extend(children_of(p))
    return seen


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        return stat[stat.rindex(")") + 2] != "Z"
    except (OSError, ValueError, IndexError):
        return False


def kill_quietly(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pid: int, include_root: bool = True, rounds: int = 50) -> None:
    """SIGKILL `pid`'s whole tree; repeat the walk, since a process may fork while we walk.

    Killed processes cannot fork again, so a few rounds always suffice; the bound is a safety net.
    """
    for _ in range(rounds):
        tree = descendants(pid)
        targets = ([pid] if include_root and alive(pid) else []) + [p for p in tree if alive(p)]
        if not targets:
            return
        for p in targets:
            kill_quietly(p)
        time.sleep(0.001)


def reap_all() -> list[tuple[int, int]]:
    """waitpid(-1, WNOHANG) until nothing is left to reap: [(pid, raw status)]."""
    reaped: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.append((pid, status))


def sweep_strays(me: int, keep: set[int], timeout_s: float = 5.0) -> list[tuple[int, int]]:
    """Kill and reap every descendant of `me` (a subreaper) not under one of the `keep` children.

    Returns what was reaped (the caller may own some of those pids). Repeats until no stray is left:
    killing a stray's parent re-parents its children to us, which the next round catches.
    """
    reaped: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout_s
    while True:
        strays = [p for p in children_of(me) if p not in keep]
        reaped += reap_all()
        if not strays:
            return reaped
        for p in strays:
            kill_tree(p)
        if time.monotonic() > deadline:
            return reaped
        time.sleep(0.001)


def exit_code(status: int) -> int:
    """A raw wait status as Popen.returncode does it: the exit code, or -signal."""
    return os.waitstatus_to_exitcode(status)
