"""A seccomp filter for the candidate's process: the kernel's own refusal of the system calls it never needs.

Built as a classic BPF program with ctypes and installed with prctl(PR_SET_SECCOMP) by the trusted set-up
in the forked child, before any candidate code is imported (it needs no_new_privs, which the walls set
first). It holds for every thread and process the candidate starts afterwards, Python or native, and no
process can remove it.

What it does:
- kills the whole process (SECCOMP_RET_KILL_PROCESS: SIGSYS, which the judge records as tampering) on calls
  that only serve to leave the sandbox or reach the kernel: ptrace and process_vm_*, mount and the new
  mount API, unshare/setns and clone with namespace flags (user namespaces would hand the process a fresh
  set of capabilities), chroot/pivot_root, module and kexec loading, bpf, keyrings, reboot and swap,
  accounting, handle-based opens, userfaultfd, port I/O, setting the clocks or the host name;
- answers ENOSYS for clone3 (its flags live in memory a filter cannot read; glibc falls back to clone,
  whose flags it can) and io_uring (its operations would bypass this filter), and EACCES for
  perf_event_open and sockets other than AF_UNIX: libraries may probe these, so a refusal is an error
  they can handle rather than a death;
- kills a process whose calls come through another ABI (i386 or x32 on x86_64), where the numbers differ.

Architectures: x86_64 and aarch64; elsewhere `supported()` is False and the walls say so.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
from dataclasses import dataclass

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
RET_KILL_PROCESS = 0x80000000
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
_LD_W_ABS, _JEQ_K, _JSET_K, _JGE_K, _RET_K = 0x20, 0x15, 0x45, 0x35, 0x06
_NR, _ARCH, _ARG0_LO = 0, 4, 16

CLONE_NAMESPACES = 0x10000000 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x20000000 | 0x40000000
AF_UNIX = 1

# name -> (x86_64, aarch64)
_KILLED = {
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "unshare": (272, 97), "setns": (308, 268), "open_tree": (428, 428), "move_mount": (429, 429),
    "fsopen": (430, 430), "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433),
    "mount_setattr": (442, 442), "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106), "bpf": (321, 280),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218), "reboot": (169, 142),
    "swapon": (167, 224), "swapoff": (168, 225), "acct": (163, 89), "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264), "userfaultfd": (323, 282), "quotactl": (179, 60),
    "syslog": (103, 116), "settimeofday": (164, 170), "clock_settime": (227, 112), "adjtimex": (159, 171),
    "clock_adjtime": (305, 266), "sethostname": (170, 161), "setdomainname": (171, 162),
    "vhangup": (153, 58), "lookup_dcookie": (212, 18), "pidfd_getfd": (438, 438),
}
_X86_ONLY_KILLED = {"iopl": 172, "ioperm": 173, "uselib": 134}
_ERRNO = {"clone3": ((435, 435), errno.ENOSYS), "io_uring_setup": ((425, 425), errno.ENOSYS),
          "io_uring_enter": ((426, 426), errno.ENOSYS), "io_uring_register": ((427, 427), errno.ENOSYS),
          "perf_event_open": ((298, 241), errno.EACCES)}
_CLONE = (56, 220)
_SOCKET = (41, 198)
_ARCHES = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7), "arm64": (1, 0xC00000B7)}


class _Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Insn))]


@dataclass(frozen=True)
class Filter:
    """The assembled program (instructions as (code, jt, jf, k)) and what it refuses, for the report."""

    insns: tuple[tuple[int, int, int, int], ...]
    killed: tuple[str, ...]
    denied: tuple[str, ...]


def supported() -> bool:
    return platform.machine() in _ARCHES and hasattr(ctypes.CDLL(None), "prctl")


@functools.lru_cache(maxsize=1)
def build() -> Filter:
    """Assemble the filter for this machine's architecture (jumps resolved to forward offsets)."""
    index, audit_arch = _ARCHES[platform.machine()]
    x86 = index == 0
    killed = {name: nrs[index] for name, nrs in _KILLED.items()}
    if x86:
        killed.update(_X86_ONLY_KILLED)
    denied = {name: (nrs[index], err) for name, (nrs, err) in _ERRNO.items()}

    prog: list[tuple[int, object, object, int]] = []     # (code, jt, jf, k); jt/jf may be labels

    def emit(code: int, k: int, jt: object = 0, jf: object = 0) -> None:
        prog.append((code, jt, jf, k))

    emit(_LD_W_ABS, _ARCH)
    emit(_JEQ_K, audit_arch, 0, "kill")
    emit(_LD_W_ABS, _NR)
    if x86:
        emit(_JGE_K, 0x40000000, "kill", 0)              # x32 calls carry this bit
    for nr in sorted(killed.values()):
        emit(_JEQ_K, nr, "kill", 0)
    for name, (nr, _) in sorted(denied.items()):
        emit(_JEQ_K, nr, f"errno_{name}", 0)
    emit(_JEQ_K, _CLONE[index], "clone", 0)
    emit(_JEQ_K, _SOCKET[index], "socket", 0)
    emit(_RET_K, RET_ALLOW)
    labels: dict[str, int] = {}
    labels["clone"] = len(prog)
    emit(_LD_W_ABS, _ARG0_LO)
    emit(_JSET_K, CLONE_NAMESPACES, "kill", 0)
    emit(_RET_K, RET_ALLOW)
    labels["socket"] = len(prog)
    emit(_LD_W_ABS, _ARG0_LO)
    emit(_JEQ_K, AF_UNIX, 0, "errno_socket")
    emit(_RET_K, RET_ALLOW)
    labels["errno_socket"] = len(prog)
    emit(_RET_K, RET_ERRNO | errno.EACCES)
    for name, (_, err) in sorted(denied.items()):
        labels[f"errno_{name}"] = len(prog)
        emit(_RET_K, RET_ERRNO | err)
    labels["kill"] = len(prog)
    emit(_RET_K, RET_KILL_PROCESS)

    def offset(at: int, target: object) -> int:
        if isinstance(target, int):
            return target
        jump = labels[str(target)] - at - 1
        if not 0 <= jump <= 255:
            raise ValueError(f"seccomp jump to {target} out of range ({jump})")
        return jump

    insns = tuple((code, offset(i, jt), offset(i, jf), k) for i, (code, jt, jf, k) in enumerate(prog))
    return Filter(insns, tuple(sorted(killed)), tuple(sorted(denied)) + ("socket (not AF_UNIX)",))


def install(flt: Filter) -> None:
    """Set no_new_privs and load the filter into this (single-threaded) process; raises OSError if refused."""
    libc = ctypes.CDLL(None, use_errno=True)
    ul = ctypes.c_ulong
    if libc.prctl(PR_SET_NO_NEW_PRIVS, ul(1), ul(0), ul(0), ul(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
    insns = (_Insn * len(flt.insns))(*[_Insn(c, jt, jf, k) for c, jt, jf, k in flt.insns])
    prog = _Prog(len(flt.insns), insns)
    if libc.prctl(PR_SET_SECCOMP, ul(SECCOMP_MODE_FILTER), ctypes.byref(prog), ul(0), ul(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_SECCOMP): {os.strerror(err)}")
