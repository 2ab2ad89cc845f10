"""Landlock for the candidate's process: writes only where the scratch folder is, whoever the uid.

Landlock (Linux 5.13+, unprivileged) lets a process give up access rights for itself and everything it
starts, irrevocably. The walls use it so the kernel refuses, for the candidate's process and every process
it starts (native code, a compiler, a shell):

- any change to the file system outside the granted folders: creating, removing, renaming, linking,
  truncating or opening for writing (rights handled: every write-like right this kernel knows);
- TCP bind and connect (ABI 4+), where the network namespace is not available;
- signals to processes outside its own Landlock domain and connections to abstract UNIX sockets created
  outside it (ABI 6+), where the PID and network namespaces are not available.

Reading is not restricted (Landlock can only grant, and the task's folder is kept from the candidate by the
mount namespace where there is one; the judge never reads what a candidate could write, see
ksearch.task.snapshot). Granted: the scratch folder (all handled rights), a private /dev/shm (where the
mount namespace made one), and writing to the device files a candidate's libraries open: /dev/null,
/dev/zero, /dev/full, /dev/nvidia* and /dev/dri/*.
"""

from __future__ import annotations

import ctypes
import glob
import os
from dataclasses import dataclass

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446      # the same on x86_64 and aarch64
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_REMOVE_DIR, FS_REMOVE_FILE, FS_MAKE_CHAR, FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
FS_MAKE_REG, FS_MAKE_SOCK, FS_MAKE_FIFO, FS_MAKE_BLOCK, FS_MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
FS_REFER, FS_TRUNCATE = 1 << 13, 1 << 14
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

_WRITE_V1 = (FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_CHAR | FS_MAKE_DIR | FS_MAKE_REG
             | FS_MAKE_SOCK | FS_MAKE_FIFO | FS_MAKE_BLOCK | FS_MAKE_SYM)
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE
DEVICE_GLOBS = ("/dev/null", "/dev/zero", "/dev/full", "/dev/nvidia*", "/dev/dri/*")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """Landlock's ABI version here (0: not available: an old kernel, or the LSM is not enabled)."""
    try:
        v = _libc().syscall(ctypes.c_long(_CREATE_RULESET), None, ctypes.c_size_t(0),
                            ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(0, int(v))


@dataclass(frozen=True)
class Rules:
    """What one candidate's process keeps: the folders it may change and the devices it may write."""

    writable_dirs: tuple[str, ...]
    device_globs: tuple[str, ...] = DEVICE_GLOBS


def handled_fs(abi: int) -> int:
    rights = _WRITE_V1
    if abi >= 2:
        rights |= FS_REFER
    if abi >= 3:
        rights |= FS_TRUNCATE
    return rights


def restrict(rules: Rules, abi: int) -> list[str]:
    """Restrict this process (no_new_privs must be set). Returns what was restricted, for the report."""
    libc = _libc()
    fs = handled_fs(abi)
    attr = _RulesetAttr(fs, (NET_BIND_TCP | NET_CONNECT_TCP) if abi >= 4 else 0,
                        (SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = libc.syscall(ctypes.c_long(_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    try:
        for path in rules.writable_dirs:
            _allow(libc, ruleset, path, fs)
        for pattern in rules.device_globs:
            for path in glob.glob(pattern):
                if os.path.exists(path) and not os.path.isdir(path):
                    _allow(libc, ruleset, path, (FS_WRITE_FILE | (FS_TRUNCATE if abi >= 3 else 0)) & fs)
        if libc.syscall(ctypes.c_long(_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(ruleset)
    done = [f"file-system writes only in {', '.join(rules.writable_dirs)} and to device files"]
    if abi >= 4:
        done.append("no TCP bind/connect")
    if abi >= 6:
        done.append("no signals or abstract sockets outside its domain")
    return done


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        rule = _PathBeneath(rights, fd)
        if libc.syscall(ctypes.c_long(_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                        ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_add_rule({path}): {os.strerror(err)}")
    finally:
        os.close(fd)
