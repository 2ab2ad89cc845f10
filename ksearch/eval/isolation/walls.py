"""The walls the kernel enforces around a candidate's process; the audit hook only gives earlier, friendlier errors.

Applied by the fork server's trusted set-up in each forked child (ksearch.eval.isolation.forkserver), before any
candidate code is imported, in this order:

1. a mount namespace of its own ("root": with root's capabilities, the child being PID 2 of its own PID
   namespace; "userns": without root, inside a user namespace of its own, which also gets an empty
   network namespace), in which
   - a fresh /proc shows only the child's PID namespace (root mode);
   - folders above the paths the candidate needs (Python, its libraries, ksearch, the scratch folder)
     that an unprivileged uid could not traverse (/root is 0700) are veiled: an empty tmpfs over them
     with only those paths bound back in, so nothing else in them is even visible;
   - the task's folder (or the whole tasks root) is covered by an empty read-only tmpfs;
   - every mount is made read-only (recursively, /proc, /sys and /dev included: device files stay
     writable, the kernel does not apply a mount's read-only flag to them, so /dev/null and the GPU's
     /dev/nvidia* keep working);
   - the scratch folder becomes a size-limited tmpfs owned by the candidate's uid (its only writable
     place: Triton, CUDA and torch caches, TMPDIR and HOME point into it), and /dev/shm a private,
     size-limited tmpfs. Both disappear with the namespace: nothing a candidate writes outlives it, even
     when its worker is killed;
   - an IPC namespace of its own: System V shared memory, semaphores and message queues belong to a
     namespace, not to a process, and would otherwise stay on the host after the candidate is gone (a
     channel to later candidates, host memory never given back);
2. an unprivileged uid and gid (nobody), when that uid can read everything the candidate needs (probed
   once); else the candidate keeps uid 0 without any capability (which, with every mount read-only, still
   writes nothing outside its scratch). As nobody its tasks are also capped by RLIMIT_NPROC (`uid_tasks_cap`):
   the kernel counts every task of that uid, zombies its namespace's init never reaps included, so a host
   without a control group (the H100 of 2026-12-05) still keeps PIDs for the judge;
3. no capabilities at all (bounding and ambient sets emptied), no_new_privs;
4. Landlock (ksearch.eval.isolation.landlock): writes only in the scratch folder (and a private /dev/shm) and to
   device files; no TCP; no signals or abstract sockets outside its domain;
5. a seccomp filter (ksearch.eval.isolation.seccomp): calls that only serve to leave the sandbox kill the process;
6. a control group of its own (ksearch.eval.isolation.cgroups, made by the fork server and joined by the child
   before any of this): the host memory it holds (mapped or not: memfd, tmpfs, System V) and its tasks are
   counted and limited by the kernel, and the judge stops every process it started by it.

`probe()` decides once per fork server, in throwaway children, which of these this machine allows, and
the fork server reports the result (`WallsPlan.describe()`: in the report's environment and the
evaluator's log). A wall the probe found available is never silently skipped later: if it fails in a
child, that child fails.

What remains when not root and without user namespaces: no mount namespace (the task's files stay
readable, /dev/shm is the host's), the candidate keeps the user's uid; Landlock (kernel 5.13+ with the LSM
enabled) still confines writes to the scratch folder, blocks creating /dev/shm segments, TCP and signals to
other processes, and seccomp still kills the escape calls. Without Landlock either, only the audit hook
stands between native code and the user's files. Without a control group (not root, or no writable
hierarchy) the judge stops a candidate by its PID namespace's process tree (root: ksearch.eval.isolation.pidtree),
and only without that either by its process group, which a process it starts can leave.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ksearch.eval.isolation import landlock, reaper, seccomp
from ksearch.eval.isolation.cgroups import PIDS_MAX

NOBODY = 65534
SCRATCH_BYTES = 1 << 30
SHM_BYTES = 256 << 20
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 1 << 14, 1 << 18
CLONE_NEWUSER = 0x10000000
CLONE_NEWIPC = 0x08000000
MOUNT_ATTR_RDONLY = 0x1
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
_MOUNT_SETATTR = 442
_MOUNT_FLAGS = {"ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC,
                "noatime": 1024, "nodiratime": 2048, "relatime": 1 << 21, "strictatime": 1 << 24}


@dataclass(frozen=True)
class WallsPlan:
    """What this fork server's children get (decided by `probe`; picklable)."""

    mount: str = ""                     # "root" | "userns" | "" (no mount namespace)
    private_proc: bool = False
    uid: int | None = None              # the uid/gid the candidate runs as (None: unchanged)
    gid: int | None = None
    needed: tuple[str, ...] = ()        # what the candidate must reach (veiled in when a folder above blocks it)
    landlock_abi: int = 0
    seccomp: bool = False
    drop_caps: bool = True
    read_only: bool = True              # with a mount namespace: every mount read-only but scratch and /dev/shm
    scratch_bytes: int = SCRATCH_BYTES
    shm_bytes: int = SHM_BYTES
    cgroups: str = ""                   # the control group each candidate gets, described ("": none)
    uid_tasks: int = 0                  # RLIMIT_NPROC of `uid` (uid_tasks_cap, read in the host's PID namespace)
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = []
        if self.mount:
            parts.append(f"mount namespace ({'as root' if self.mount == 'root' else 'in a user namespace, no network'}): "
                         + ("read-only file system, " if self.read_only else "file system left writable, ")
                         + f"{self.scratch_bytes >> 20} MiB tmpfs scratch, private "
                         f"/dev/shm and IPC, the task's files hidden" + (", private /proc" if self.private_proc else ""))
        elif self.private_proc:
            parts.append("private /proc")
        if self.uid is not None:
            parts.append(f"uid {self.uid}" + (f" (its tasks capped at {self.uid_tasks})" if self.uid_tasks else ""))
        elif os.geteuid() == 0:
            parts.append("uid 0 without capabilities")
        if self.drop_caps:
            parts.append("no capabilities, no_new_privs")
        if self.landlock_abi:
            parts.append(f"Landlock ABI {self.landlock_abi} (writes only in scratch)")
        if self.seccomp:
            parts.append("seccomp filter")
        if self.cgroups:
            parts.append(self.cgroups)
        text = "; ".join(parts) or "no kernel walls"
        return text + ("" if not self.notes else " [" + "; ".join(self.notes) + "]")


@dataclass(frozen=True)
class ChildWalls:
    """Per child: its scratch folder, what to hide from it, and folders copied into its scratch first."""

    scratch: str
    hidden: tuple[str, ...] = ()
    seeds: tuple[tuple[str, str], ...] = ()     # (sub-folder of scratch, folder to copy there)


_current: WallsPlan | None = None


def current() -> WallsPlan | None:
    """The plan of the fork server this process started last (for the report's environment)."""
    return _current


def set_current(plan: WallsPlan | None) -> None:
    global _current
    _current = plan


# ---------------------------------------------------------------------------------------------------------
# mount helpers
# ---------------------------------------------------------------------------------------------------------
def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    libc = reaper.libc()
    fn = libc.mount
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731 - a one-line helper for the call below
    if fn(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {target}: {os.strerror(err)}")


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


def _mount_points() -> list[tuple[str, int]]:
    """(mount point, flags to keep) of this process's mount namespace, parents first."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")
            flags = 0
            for opt in fields[5].split(","):
                flags |= _MOUNT_FLAGS.get(opt, 0)
            out.append((point, flags))
    return out


def make_read_only() -> None:
    """Every mount of this namespace read-only (recursively); later mounts (scratch, /dev/shm) are not."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    libc = reaper.libc()
    r = libc.syscall(ctypes.c_long(_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), b"/", ctypes.c_uint(AT_RECURSIVE),
                     ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
    if r == 0:
        return
    err = ctypes.get_errno()
    if err not in (38, 22):           # ENOSYS (before 5.12) or EINVAL: remount one by one
        raise OSError(err, f"mount_setattr(/, rdonly): {os.strerror(err)}")
    for point, flags in _mount_points():
        try:
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | (flags & ~MS_RDONLY))
        except OSError as e:
            if e.errno not in (2, 13):   # a mount point hidden under another mount
                raise


def _traversable_by(path: str, uid: int, gid: int) -> bool:
    try:
        st = os.stat(path)
    except OSError:
        return False
    mode = st.st_mode
    if st.st_uid == uid:
        return bool(mode & stat.S_IXUSR)
    if st.st_gid == gid:
        return bool(mode & stat.S_IXGRP)
    return bool(mode & stat.S_IXOTH)


def veils_for(paths: list[str], uid: int, gid: int) -> dict[str, list[str]]:
    """{folder an unprivileged uid cannot traverse: the paths below it to bind back in} (topmost folders)."""
    veils: dict[str, list[str]] = {}
    for p in sorted(set(paths)):
        parts = Path(p).parts
        for i in range(2, len(parts)):
            above = str(Path(*parts[:i]))
            if any(above == v or above.startswith(v + os.sep) for v in veils if v != above):
                break
            if not _traversable_by(above, uid, gid):
                veils.setdefault(above, []).append(p)
                break
    for v, below in veils.items():          # a path under another exposed path comes with it
        below.sort()
        keep: list[str] = []
        for p in below:
            if not any(p == k or p.startswith(k + os.sep) for k in keep):
                keep.append(p)
        veils[v] = keep
    return veils


def _apply_veils(veils: dict[str, list[str]], make_dirs: list[str]) -> None:
    """Cover each folder with an empty tmpfs and bind back only the paths the candidate needs."""
    for folder, exposed in veils.items():
        fds = []
        for p in exposed:
            fds.append((p, os.open(p, os.O_PATH | os.O_CLOEXEC)))
        _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
        for p, fd in fds:
            try:
                if os.path.isdir(f"/proc/self/fd/{fd}"):
                    os.makedirs(p, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(p), exist_ok=True)
                    open(p, "a").close()
                _mount(f"/proc/self/fd/{fd}", p, None, MS_BIND | MS_REC)
            finally:
                os.close(fd)
        for d in make_dirs:
            if d.startswith(folder + os.sep):
                os.makedirs(d, exist_ok=True)


# ---------------------------------------------------------------------------------------------------------
# the child's set-up
# ---------------------------------------------------------------------------------------------------------
def _enter_user_namespace() -> None:
    uid, gid = os.getuid(), os.getgid()
    reaper.unshare(CLONE_NEWUSER | reaper.CLONE_NEWNS | reaper.CLONE_NEWNET | CLONE_NEWIPC)
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def _mounts(plan: WallsPlan, child: ChildWalls, uid: int, gid: int) -> None:
    scratch = child.scratch
    if plan.mount == "userns":
        _enter_user_namespace()
    else:
        reaper.unshare(reaper.CLONE_NEWNS | CLONE_NEWIPC)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)          # nothing we mount reaches the host
    if plan.uid is not None:
        _apply_veils(veils_for(list(plan.needed) + [scratch], plan.uid, plan.gid or plan.uid), [scratch])
    for h in child.hidden:
        if os.path.isdir(h):
            _mount("tmpfs", h, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")
    if plan.read_only:
        make_read_only()
    if plan.private_proc:      # after the read-only pass: CUDA writes to the process's own /proc entries (H200:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)    # error 304 with /proc read-only)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
               f"size={plan.shm_bytes},mode=1777")
    _mount("tmpfs", scratch, "tmpfs", MS_NOSUID | MS_NODEV,
           f"size={plan.scratch_bytes},mode=0700,uid={uid},gid={gid}")


def _copy_seeds(child: ChildWalls, fds: list[tuple[str, int]], uid: int, gid: int) -> None:
    for sub, fd in fds:
        dest = os.path.join(child.scratch, sub)
        shutil.copytree(f"/proc/self/fd/{fd}", dest, symlinks=True, dirs_exist_ok=True)
        if os.geteuid() == 0 and (uid, gid) != (0, 0):
            for root, dirs, files in os.walk(dest):
                for name in [root] + [os.path.join(root, n) for n in dirs + files]:
                    os.lchown(name, uid, gid)
        os.close(fd)


def _own_proc_dir() -> str:
    """This process's folder in the /proc it sees (its threads' task/ folders are below it)."""
    return os.path.join("/proc", os.readlink("/proc/self"))


def _give_output_pipes(uid: int, gid: int) -> None:
    """The child's own output pipe (fd 1 and 2) belongs to its uid, so /dev/stdout and /dev/stderr (reopened
    through /proc/self/fd) still work after the switch. Only pipes: fd 0 is the host's /dev/null."""
    for fd in (1, 2):
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.fchown(fd, uid, gid)
        except OSError:
            pass


def uid_tasks_cap() -> int:
    """RLIMIT_NPROC for the candidates' uid: a quarter of the host's PIDs, within [PIDS_MAX, 4 x PIDS_MAX].

    The kernel counts tasks per uid, not per candidate: candidates evaluated side by side share it (each
    needs tens of threads: torch, Triton, CUDA), so it is wider than one control group's pids.max."""
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        pid_max = 32768
    return max(PIDS_MAX, min(4 * PIDS_MAX, pid_max // 4))


def _drop_to(uid: int, gid: int) -> None:
    """Empty the bounding set while we may, then become uid/gid (which clears every capability)."""
    try:
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        reaper.libc().prctl(reaper.PR_CAPBSET_DROP, ctypes.c_ulong(cap), ctypes.c_ulong(0), ctypes.c_ulong(0),
                            ctypes.c_ulong(0))
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    reaper.drop_capabilities()        # nothing left to drop but the ambient set; sets no_new_privs


def apply(plan: WallsPlan, child: ChildWalls) -> list[str]:
    """Wall this (single-threaded, freshly forked) process in. Raises if a planned wall cannot be built."""
    done: list[str] = []
    target_uid = plan.uid if plan.uid is not None else os.geteuid()
    target_gid = plan.gid if plan.gid is not None else os.getegid()
    seed_fds = [(sub, os.open(src, os.O_PATH | os.O_CLOEXEC | os.O_DIRECTORY)) for sub, src in child.seeds
                if os.path.isdir(src)]
    if plan.mount:
        _mounts(plan, child, target_uid, target_gid)
        done.append("mounts")
    else:
        if plan.private_proc:
            reaper.make_private_proc()    # as the judge before the walls did (CUDA started so on the H200)
        if plan.uid is not None:
            os.chown(child.scratch, target_uid, target_gid)
    _copy_seeds(child, seed_fds, target_uid, target_gid)
    if plan.uid is not None:
        _give_output_pipes(plan.uid, plan.gid if plan.gid is not None else plan.uid)
        if plan.uid_tasks:                # enforced once it is not root
            resource.setrlimit(resource.RLIMIT_NPROC, (plan.uid_tasks, plan.uid_tasks))
        _drop_to(plan.uid, plan.gid if plan.gid is not None else plan.uid)
        done.append("uid")
    elif plan.drop_caps:
        reaper.drop_capabilities()
    if plan.drop_caps or plan.landlock_abi or plan.seccomp:
        reaper.libc().prctl(reaper.PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), ctypes.c_ulong(0), ctypes.c_ulong(0),
                            ctypes.c_ulong(0))
    if plan.landlock_abi:
        writable = [child.scratch] + (["/dev/shm"] if plan.mount and os.path.isdir("/dev/shm") else [])
        writable.append(_own_proc_dir())     # CUDA writes to its own /proc entries (H200: error 304 without)
        landlock.restrict(landlock.Rules(tuple(writable)), plan.landlock_abi)
        done.append("landlock")
    if plan.seccomp:
        seccomp.install(seccomp.build())
        done.append("seccomp")
    return done


# ---------------------------------------------------------------------------------------------------------
# deciding what this machine allows
# ---------------------------------------------------------------------------------------------------------
def _module_dir(name: str) -> str | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not os.path.isabs(spec.origin):
        return None
    return os.path.dirname(os.path.realpath(spec.origin))


def needed_paths() -> tuple[str, ...]:
    """What a candidate's process reads after the fork: Python, its libraries, ksearch, programs it starts."""
    out: set[str] = set()
    for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
              os.path.dirname(os.path.realpath(sys.executable))):
        out.add(p)
    out.update(p for p in sys.path if p)
    for name in ("torch", "triton", "numpy", "ksearch"):
        d = _module_dir(name)
        if d:
            out.add(os.path.dirname(d))
    for var in ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"):
        out.update(p for p in os.environ.get(var, "").split(os.pathsep) if p)
    real = {os.path.realpath(p) for p in out}
    return tuple(sorted(p for p in real if os.path.isdir(p) and p != os.sep))


def _readable_as(paths: tuple[str, ...]) -> list[str]:
    """Which of `paths` this process cannot read and traverse (directories) or read (files)."""
    bad = []
    for p in paths:
        if not os.access(p, os.R_OK | (os.X_OK if os.path.isdir(p) else 0)):
            bad.append(p)
    for dev in _gpu_devices():
        if not os.access(dev, os.R_OK | os.W_OK):
            bad.append(dev)
    return bad


def _gpu_devices() -> list[str]:
    import glob

    return [p for p in glob.glob("/dev/nvidia*") if not os.path.isdir(p)]


def _try(plan: WallsPlan, new_pid_ns: bool) -> tuple[bool, str]:
    """Build `plan` in a throwaway child (and check it holds); (ok, why not)."""
    root = tempfile.mkdtemp(prefix="ksearch_walls_probe_")
    os.chmod(root, 0o711)         # as the spawner's scratch root (spawn.CandidateSpawner): passable, not listable
    scratch = os.path.join(root, "scratch")
    hidden = os.path.join(root, "hidden")
    os.makedirs(scratch)
    os.makedirs(hidden)
    Path(hidden, "secret").write_text("x")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code, why = 1, ""
        try:
            os.close(r)
            if new_pid_ns:         # as the fork server places a candidate: PID 2 of new PID and network namespaces
                reaper.unshare(reaper.CLONE_NEWPID | reaper.CLONE_NEWNET)
                inner = os.fork()
                if inner != 0:
                    _, status = os.waitpid(inner, 0)
                    os._exit(os.waitstatus_to_exitcode(status))
            apply(plan, ChildWalls(scratch, (hidden,)))
            for var, sub in (("HOME", "home"), ("TMPDIR", "tmp"), ("CUDA_CACHE_PATH", "cuda"),
                             ("XDG_CACHE_HOME", "xdg")):          # where a candidate's caches go
                os.makedirs(os.path.join(scratch, sub), exist_ok=True)
                os.environ[var] = os.path.join(scratch, sub)
            why = _check(plan, root, scratch, hidden)
            code = 0 if not why else 1
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which decides
            why = f"{type(e).__name__}: {e}"
        try:
            os.write(w, why.encode()[:4000])
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        why = f.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    shutil.rmtree(root, ignore_errors=True)
    ok = os.waitstatus_to_exitcode(status) == 0
    return ok, "" if ok else (why or f"the probe ended: {os.waitstatus_to_exitcode(status)}")


def _check(plan: WallsPlan, root: str, scratch: str, hidden: str) -> str:
    """In the walled probe child: does it hold (writes only in scratch) and does what must work, work?"""
    Path(scratch, "ok").write_text("ok")
    with open("/dev/null", "w") as f:
        f.write("ok")
    confined = bool(plan.mount or plan.landlock_abi)
    for outside in (os.path.join(root, "escaped"), os.path.join(tempfile.gettempdir(), "ksearch_walls_escaped")):
        if not confined:
            break
        try:
            with open(outside, "w"):
                pass
            os.unlink(outside)
            return f"a write outside the scratch folder succeeded ({outside})"
        except OSError:
            pass
    if plan.mount and os.listdir(hidden):
        return "the hidden folder is still visible"
    bad = _readable_as(plan.needed) if plan.uid is not None else []
    if bad:
        return f"uid {plan.uid} cannot read {', '.join(bad[:3])}"
    return _cuda_problem()


CUDA_PREFIX = "CUDA does not start inside these walls"


def _cuda_problem() -> str:
    """On a machine with NVIDIA devices: can a walled child start CUDA and run a kernel? ("" when it can.)

    Asked in the probe child only: the fork server must never initialise CUDA itself (its children would
    inherit a driver state they cannot use). On the H200 a first version of the walls passed every other
    check and then failed every candidate with cudaGetDeviceCount error 304."""
    if not _gpu_devices():
        return ""
    try:
        import torch

        torch.cuda.init()
        x = torch.ones(4, device="cuda")
        if float((x + 1).sum().item()) != 8.0:
            return f"{CUDA_PREFIX}: a kernel gave a wrong result"
    except Exception as e:  # noqa: BLE001 - any failure means these walls are too tight for CUDA
        return f"{CUDA_PREFIX}: {type(e).__name__}: {str(e)[:300]}"
    return ""


# The walls in the order they are given up when CUDA does not start inside them: the newest and the
# narrowest first, the configuration the judge ran on the H200 before the walls (its own PID and network
# namespaces, a private /proc, no capabilities) last.
_LADDER: tuple[tuple[str, str], ...] = (
    ("seccomp", "the seccomp filter"), ("landlock_abi", "Landlock"), ("uid", "the unprivileged uid"),
    ("read_only", "the read-only file system"), ("mount", "the mount namespace"),
    ("private_proc", "the private /proc"), ("drop_caps", "dropping capabilities"))
_OFF: dict[str, Any] = {"seccomp": False, "landlock_abi": 0, "uid": None, "read_only": False, "mount": "",
                        "private_proc": False, "drop_caps": False}


def _has(plan: WallsPlan, wall: str) -> bool:
    if wall == "read_only":
        return bool(plan.mount) and plan.read_only
    return getattr(plan, wall) != _OFF[wall]


def _drop(plan: WallsPlan, wall: str) -> WallsPlan:
    if wall == "uid":
        return replace(plan, uid=None, gid=None, needed=())
    return replace(plan, **{wall: _OFF[wall]})


def _restore(plan: WallsPlan, wall: str, like: WallsPlan) -> WallsPlan:
    if wall == "uid":
        return replace(plan, uid=like.uid, gid=like.gid, needed=like.needed)
    return replace(plan, **{wall: getattr(like, wall)})


def _without_what_stops_cuda(first: WallsPlan, new_pid_ns: bool, tryer: Any = None) -> tuple[WallsPlan | None,
                                                                                              list[str]]:
    """CUDA did not start under `first`: give up walls one at a time (in _LADDER's order) until it does, then
    put back, one at a time, each wall given up on the way that CUDA starts with. Returns the strongest plan
    found (None if CUDA starts under none of them) and notes that name each wall left out and why.

    Costs one CUDA start per plan tried (14 at most), only on a machine where a wall stops CUDA."""
    tryer = tryer or _try
    dropped: list[str] = []
    plan, found, last_why = first, None, ""
    for wall, _ in _LADDER:
        if not _has(plan, wall):
            continue
        plan = _drop(plan, wall)
        dropped.append(wall)
        ok, last_why = tryer(plan, new_pid_ns)
        if ok:
            found = plan
            break
    if found is None:
        return None, [f"CUDA does not start even without any of the walls ({last_why})"]
    notes: list[str] = []
    labels = dict(_LADDER)
    for wall in reversed(dropped):
        back = _restore(found, wall, first)
        if not _has(back, wall):
            continue               # the read-only flag means nothing without the mount namespace
        ok, why = tryer(back, new_pid_ns)
        if ok:
            found = back
        else:
            notes.append(f"{labels[wall]} left out: {why}")
    return found, notes


def probe(namespaces: bool, private_proc: bool, *, want_uid: bool = True, scratch_bytes: int = SCRATCH_BYTES,
          shm_bytes: int = SHM_BYTES, drop_caps: bool = True) -> WallsPlan:
    """The strongest plan this machine allows. `namespaces`: the children are in their own PID and network
    namespaces made as root (the fork server's "namespaces" isolation); `private_proc`: a new /proc mount
    works there. Forks throwaway children (each starts CUDA where there is a GPU, as a candidate would)."""
    notes: list[str] = []
    abi = landlock.abi_version()
    if not abi:
        notes.append("Landlock is not available (kernel < 5.13 or the LSM is off)")
    use_seccomp = seccomp.supported()
    if not use_seccomp:
        notes.append("no seccomp filter for this architecture")
    base = WallsPlan(landlock_abi=abi, seccomp=use_seccomp, drop_caps=drop_caps, scratch_bytes=scratch_bytes,
                     uid_tasks=uid_tasks_cap(),
                     shm_bytes=shm_bytes, private_proc=private_proc and namespaces)
    candidates: list[tuple[WallsPlan, bool]] = []
    root = os.geteuid() == 0
    if namespaces:
        mounted = replace(base, mount="root")
        if root and want_uid:
            candidates.append((replace(mounted, uid=NOBODY, gid=NOBODY, needed=needed_paths()), True))
        candidates.append((mounted, True))
    elif not root:
        candidates.append((replace(base, mount="userns"), False))
    candidates.append((base, namespaces))
    last_why = ""
    for first, new_pid_ns in candidates:
        plan: WallsPlan | None = first
        ok, why = _try(first, new_pid_ns)
        if not ok and why.startswith(CUDA_PREFIX):
            plan, cuda_notes = _without_what_stops_cuda(first, new_pid_ns)
            notes.extend(cuda_notes)
            ok = plan is not None
            if not ok:         # nothing helps: keep the walls that hold (CUDA fails either way) and say so
                return replace(first, notes=tuple(notes))
        if ok and plan is not None:
            if plan.mount == "root" and plan.uid is None and root and want_uid and last_why:
                notes.append(f"the candidate keeps uid 0 without capabilities ({last_why})")
            if not plan.mount and (namespaces or not root) and last_why:
                notes.append(f"no mount namespace ({last_why})")
            if not plan.mount and not namespaces and root:
                notes.append("no mount namespace (namespaces are not available)")
            return replace(plan, notes=tuple(notes))
        last_why = why
    # Not even the plain walls hold: only what the judge had before them, and say so.
    notes.append(f"no kernel walls could be built ({last_why})")
    return WallsPlan(drop_caps=drop_caps, private_proc=private_proc and namespaces, notes=tuple(notes))


def to_json(plan: WallsPlan) -> str:
    return json.dumps(plan.__dict__)


def from_json(text: str) -> WallsPlan:
    data: dict[str, Any] = json.loads(text)
    for key in ("needed", "notes"):
        data[key] = tuple(data.get(key) or ())
    return WallsPlan(**data)


