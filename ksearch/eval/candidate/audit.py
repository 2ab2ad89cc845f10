"""A PEP 578 audit hook for the candidate's process: forbidden operations refused at run time.

`install(scratch_dir, ...)` (or `install_policy(AuditPolicy(...))`) is called in the candidate's fresh
process before any candidate code is imported; Python code cannot remove an audit hook. From then on the
hook refuses, by raising PermissionError("ksearch-audit: refused <operation>: <why>"):

- opening another process's /proc/PID entries (its memory, descriptors, environment, namespaces), and
  anything in the `hidden` folders (the task's, for reading too);
- file writes outside the scratch directory (open/os.open for writing, and mkdir, remove, rename, link,
  symlink, chmod, chown, truncate, utime, mknod, sqlite3.connect), and opening a directory outside it as a
  file descriptor (an os.open(..., dir_fd=) trick would otherwise dodge the path check);
- sockets: any connect, bind, sendto/sendmsg, name lookup, and creating a non-AF_UNIX socket;
- subprocesses and fork: os.system, os.fork/forkpty, pty.spawn always; subprocess.Popen, os.exec*,
  os.posix_spawn, os.spawn* and _posixsubprocess.fork_exec (which CPython does not audit: the hook wraps it,
  see `_wrap_unaudited`, and refuses a fresh copy of the module) are decided by *who asks*, not by the
  program's name: allowed when the code that starts the process (the first frame outside the standard
  library) is the toolchain's own (triton, torch._inductor, ksearch.instantiate.cuda, and torch's extension
  builder when ksearch's CUDA builder called it), so whatever those start for compiling or probing works
  (ptxas, cc, ldconfig, and `file` from platform.architecture() inside triton's cache key); refused when
  candidate code asks, even for a compiler or through torch's extension builder. Two kinds of program are
  refused whoever asks, because starting them hands control to whatever the candidate wrote: a program
  inside a writable directory (the scratch folder), and a command interpreter (`INTERPRETERS`: shells,
  script runtimes, launchers such as env/xargs), which is what a steered toolchain would be pointed at;
  signals to other processes (os.kill, os.killpg, signal.pthread_kill);
- ctypes and cffi (dlopen, dlsym, foreign calls, raw memory access) unless the call comes from a library
  (torch, triton, numpy... in site-packages);
- native code from a file (ctypes.dlopen, and extension modules through _imp.create_dynamic, wrapped): never
  a file candidate code wrote, and from the scratch folder only for the toolchain (Triton's launcher,
  ksearch's CUDA builder): numpy.ctypeslib.load_library of a shared object in scratch is refused although a
  numpy frame asks;
- named shared memory (_posixshmem.shm_open, wrapped) from candidate code; computing the task's reference
  (the `ksearch.task_reference` event of Task.reference);
- paths the hook cannot resolve for certain (a symlinked prefix past PATH_MAX, a loop): existing prefixes
  are resolved strictly, never by non-strict realpath, which stops resolving at the first error;
- frame and gc introspection from candidate code: sys._getframe, sys._current_frames,
  sys._current_exceptions, gc.get_objects/get_referrers/get_referents, reading tb_frame, gi_frame,
  cr_frame, ag_frame (the attribute reads CPython audits; f_back, f_globals and f_locals are not audited,
  so the hook guards how a frame is first obtained), sys.settrace/setprofile, adding another audit hook
  (it would be handed the evaluator's objects), replacing a function's __code__;
- forging trusted code: compile(), types.CodeType/code.replace() and marshal.loads() that would produce
  code whose file name points into the standard library, site-packages or ksearch, unless an import of a
  real file does it.

Whose call is it? The hook walks the Python frames of the call. A frame is *candidate* code when its file
is under the scratch directory or a candidate prefix, or is not a real file of the standard library,
site-packages or ksearch ("<string>", a path elsewhere). For capability events (ctypes, processes) the
first frame outside the standard library decides; for introspection the immediate caller decides, except
that modules which exist to hand frames to their caller (inspect, traceback, logging's currentframe,
threading's settrace, bdb, pdb, trace, profile) are looked through. So the standard library, torch and
triton keep working (dataclasses, typing, warnings and triton.jit's inspect.getsource call
sys._getframe) while the same calls made by a candidate are refused.

Every refusal is appended to `violations` and written once to fd 2 as one line starting with
"ksearch-audit: refused", which the fork server collects from the stream, and then (AuditPolicy.fatal, the
default) ends the process with exit code REFUSED_EXIT: the judge sees that exit code whatever the candidate
did to fd 2 (closed, or dup2'ed onto /dev/null), and records INCORRECT_TAMPERING. A check that fails in
the hook itself (an exception while deciding) refuses too.

What this does NOT stop (the kernel's walls do, ksearch.eval.isolation.walls: read-only mounts, tmpfs scratch,
an unprivileged uid, Landlock, seccomp; and the process boundary: the judge in another process):
- native code: a CUDA/C++ candidate, or a library loaded by trusted code, runs without any audit; it can
  make any system call (write files anywhere the user may, signal, map memory);
- C-level hooks that CPython does not audit, e.g. torch._C._dynamo.eval_frame.set_eval_frame (PEP 523)
  hands a callback every frame; signal handlers receive the interrupted frame as an argument;
- a refused callable passed through a trusted higher-order function (torch.utils._pytree.tree_map(f, ...)
  calls f from a torch frame), or a library function that returns a frame it fetched;
- a symlink swapped inside the scratch directory between the hook's check and the open;
- writes to file descriptors that are already open (fd 1 and 2, the connection), and os.write;
- a library helper that both writes and loads native code for its caller (triton's own C build), steered
  by the candidate: the walls contain what that code does;
- the unaudited originals behind the wrappers (`_wrap_unaudited`) stay reachable from Python (a wrapper's
  closure): what they start runs inside the same walls.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:                      # annotations only: the candidate's process imports no more than it needs
    from collections.abc import Sequence
    from types import FrameType

PREFIX = "ksearch-audit: refused"

# Programs that run code handed to them (a script, a command line): never started in a candidate's process,
# whoever asks, since a toolchain steered by the candidate (CC=..., TRITON_PTXAS_PATH=...) would start them.
INTERPRETERS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "csh", "tcsh", "fish", "busybox", "toybox",
                          "env", "xargs", "nohup", "setsid", "timeout", "nice", "ionice", "taskset", "chroot",
                          "unshare", "nsenter", "sudo", "su", "script", "expect", "python", "perl",
                          "ruby", "node", "nodejs", "lua", "luajit", "php", "tclsh", "wish", "awk", "gawk",
                          "mawk", "sed", "find", "make", "gdb", "cuda-gdb", "strace", "ltrace", "ssh", "scp",
                          "curl", "wget", "nc", "socat"})
# Code (site-packages-relative or ksearch-relative paths) that may start the allowed toolchain.
EXEC_ORIGINS = ("triton/", "torch/utils/cpp_extension.py", "torch/_inductor/", "torch/utils/_cpp_extension",
                "ksearch/instantiate/cuda.py")

# Origins that count only when ksearch's own CUDA builder called them: a Python candidate that asks torch's
# extension builder for native code directly is refused.
BUILDER_GATED_ORIGINS = ("torch/utils/cpp_extension.py", "torch/utils/_cpp_extension")
CUDA_BUILDER = "ksearch/instantiate/cuda.py"
# Code that may load native code (a shared object, an extension module) from the scratch folder: Triton's
# launcher and ksearch's CUDA builder (torch's extension loader when that builder called it).
NATIVE_ORIGINS = ("triton/", CUDA_BUILDER) + BUILDER_GATED_ORIGINS
# Extension modules whose functions the hook wraps: a fresh copy of them would dodge the wrapper.
PROTECTED_MODULES = frozenset({"_posixsubprocess", "_posixshmem", "_imp"})
# The exit code of a process the hook ended for a refusal (the judge records it as INCORRECT_TAMPERING).
REFUSED_EXIT = 86

violations: list[str] = []


@dataclass(frozen=True)
class AuditPolicy:
    """What the hook allows in one candidate's process (picklable: the fork server passes it on)."""

    scratch_dir: str
    candidate_prefixes: tuple[str, ...] = ()     # more places candidate code is loaded from
    writable: tuple[str, ...] = ()               # more directories writes may go to (the scratch dir always)
    exec_origins: tuple[str, ...] = EXEC_ORIGINS
    fatal: bool = True                           # a refusal ends the process (False: raises PermissionError)
    hidden: tuple[str, ...] = ()                 # folders the candidate may not even read (the task's)


_installed = False


def install(scratch_dir: str | os.PathLike[str], candidate_prefixes: list[str] | tuple[str, ...] = (),
            writable: list[str] | tuple[str, ...] = (), fatal: bool = True,
            hidden: Sequence[str | os.PathLike[str]] = ()) -> None:
    """Install the hook for this process (once; a second call raises RuntimeError)."""
    install_policy(AuditPolicy(os.fspath(scratch_dir), tuple(candidate_prefixes), tuple(writable), fatal=fatal,
                               hidden=tuple(os.fspath(h) for h in hidden)))


def preload_for_hook() -> None:
    """Import what the hook and the harness use later (the fork server's zygote calls it)."""
    import ctypes
    import ctypes.util  # noqa: F401 - imported before the hook, like the rest
    import shutil  # noqa: F401 - imported before the hook
    import sysconfig  # noqa: F401 - imported before the hook
    import traceback  # noqa: F401 - imported before the hook


def install_policy(policy: AuditPolicy) -> None:
    global _installed
    if _installed:
        raise RuntimeError("the ksearch audit hook is already installed in this process")
    _installed = True
    hook, skipped = _make_hook(policy)
    _wrap_unaudited(skipped)            # first: importing what it wraps must not meet the hook
    sys.addaudithook(hook)


def _wrap_unaudited(skipped: set[Any]) -> None:
    """Give an audit event to the ways of starting processes, loading native code and making shared memory
    that CPython does not audit: _posixsubprocess.fork_exec (multiprocessing.util.spawnv_passfds, and
    subprocess's own binding), _imp.create_dynamic (an extension module from any file) and
    _posixshmem.shm_open. The wrappers' own frames are skipped when the hook asks who called."""
    import _imp
    import _posixsubprocess
    import subprocess

    fork_exec, create_dynamic = _posixsubprocess.fork_exec, _imp.create_dynamic
    audit = sys.audit

    def audited_fork_exec(*args: Any) -> Any:
        exe = args[1][0] if len(args) > 1 and args[1] else (args[0][0] if args and args[0] else None)
        audit("ksearch.fork_exec", exe)
        return fork_exec(*args)

    def audited_create_dynamic(spec: Any, *rest: Any) -> Any:
        audit("ksearch.load_native", getattr(spec, "name", None), getattr(spec, "origin", None))
        return create_dynamic(spec, *rest)

    skipped.update({audited_fork_exec.__code__, audited_create_dynamic.__code__})
    _posixsubprocess.fork_exec = audited_fork_exec
    subprocess._fork_exec = audited_fork_exec          # type: ignore[attr-defined]  # a private name
    _imp.create_dynamic = audited_create_dynamic
    try:
        import _posixshmem
    except ImportError:
        _posixshmem = None
    if _posixshmem is not None:
        shm_open = _posixshmem.shm_open

        def audited_shm_open(path: Any, *rest: Any, **kw: Any) -> Any:
            audit("ksearch.shm_open", path)
            return shm_open(path, *rest, **kw)

        _posixshmem.shm_open = audited_shm_open
        skipped.add(audited_shm_open.__code__)


class UnresolvablePath(OSError):
    """A path the hook cannot resolve for certain (too long, a symlink loop): refused, never guessed."""


def _resolve(path: str) -> str:
    """The real path the kernel would open, or UnresolvablePath.

    Non-strict os.path.realpath stops resolving at the first error (a symlinked prefix past PATH_MAX) and
    returns the rest unresolved, so a path could look inside the scratch folder and open a file outside it.
    Here existing prefixes resolve strictly, a missing tail is taken as written (no '..' in it), and any
    other error is refused."""
    p = os.path.abspath(path)
    tail: list[str] = []
    while True:
        try:
            real = os.path.realpath(p, strict=True)
            break
        except FileNotFoundError:
            head, name = os.path.split(p)
            if head == p or name in ("", ".", ".."):
                raise UnresolvablePath(path) from None
            tail.append(name)
            p = head
        except (OSError, RuntimeError, ValueError) as e:
            raise UnresolvablePath(f"{path}: {e}") from None
    for name in reversed(tail):
        real = os.path.join(real, name)
    return real.rstrip(os.sep) or os.sep


def _real(path: str) -> str:
    return os.path.realpath(path).rstrip(os.sep) or os.sep


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + os.sep) or r == os.sep for r in roots)


_PROC_PID = re.compile(r"^/proc/(\d+)(/|$)")
_TRIPLET = re.compile(r"^[a-z0-9_]+-[a-z0-9_]+-[a-z0-9_]+-")
_VERSION = re.compile(r"-\d+(\.\d+)*$")


def normalise_exe(name: str) -> str:
    """x86_64-linux-gnu-gcc-12 -> gcc; the basename INTERPRETERS is written in."""
    base = os.path.basename(name)
    return _VERSION.sub("", _TRIPLET.sub("", base))


def _unversioned(path: str) -> str:
    """/usr/bin/python3.12 -> python, perl5.36 -> perl: the interpreter check ignores version suffixes."""
    return re.sub(r"[\d.]+$", "", normalise_exe(path)) or normalise_exe(path)


def _make_hook(policy: AuditPolicy) -> tuple[Any, set[Any]]:  # one closure keeps its state out of reach
    import shutil
    import socket as socket_module
    import sysconfig
    import threading
    from importlib.machinery import SourceFileLoader, SourcelessFileLoader

    O_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    scratch = _real(policy.scratch_dir)
    writable = tuple({scratch, *(_real(p) for p in policy.writable)})
    candidate_roots = tuple({scratch, *(_real(p) for p in policy.candidate_prefixes)})
    hidden = tuple({_real(p) for p in policy.hidden})
    paths = sysconfig.get_paths()
    stdlib = tuple({_real(paths["stdlib"])})
    site_set = {_real(paths[k]) for k in ("purelib", "platlib")} | {_real(p) for p in sys.path
                                                                     if p.endswith(("site-packages", "dist-packages"))}
    # Libraries installed on PYTHONPATH rather than in site-packages (an offline GPU host's bundle) are
    # libraries too, unless candidate code could live under them (a path entry above the scratch folder).
    for entry in sys.path:
        if entry and os.path.isdir(entry):
            root = _real(entry)
            if _under(root, stdlib) and not root.endswith(("site-packages", "dist-packages")):
                continue            # the standard library (and lib-dynload) stays the standard library
            if not any(_under(c, (root,)) or _under(root, (c,)) for c in candidate_roots):
                site_set.add(root)
    site = tuple(site_set)
    harness = (_real(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),)   # the ksearch package
    exec_origins = policy.exec_origins
    lookthrough_files = {"inspect.py", "traceback.py", "bdb.py", "pdb.py", "trace.py", "profile.py",
                         "cProfile.py", "threading.py", "doctest.py"}
    kinds: dict[str, str] = {}
    hook_code: list[Any] = []
    skipped: set[Any] = set()            # the wrappers' code (_wrap_unaudited): not who asks
    written: set[str] = set()            # files candidate code wrote (or moved) in the scratch folder
    fatal = policy.fatal
    exit_now = os._exit
    busy: set[int] = set()
    reported: set[str] = set()
    get_ident = threading.get_ident
    getframe = sys._getframe
    err_write = os.write
    own_pid = os.path.basename(os.path.realpath("/proc/self"))    # our pid as this /proc names it

    def kind_of(filename: str) -> str:
        """candidate | stdlib | library | harness for one code file name (cached)."""
        k = kinds.get(filename)
        if k is not None:
            return k
        if filename.startswith("<frozen "):
            k = "stdlib"
        elif not os.path.isabs(filename):
            k = "candidate"
        else:
            p = _real(filename)
            if _under(p, candidate_roots):
                k = "candidate"
            elif _under(p, site):
                k = "library"
            elif _under(p, harness):
                k = "harness"
            elif _under(p, stdlib) and os.path.isfile(p):
                k = "stdlib"
            else:
                k = "candidate"
        kinds[filename] = k
        return k

    # Longest first: a checkout on sys.path (PYTHONPATH=., an editable install) can hold a venv's site-packages,
    # and the path relative to the innermost root is the one that names the package (triton/...).
    library_roots = tuple(sorted(site + tuple(os.path.dirname(h) for h in harness), key=len, reverse=True))

    def rel_to_site(filename: str) -> str:
        p = _real(filename)
        for root in library_roots:
            if p.startswith(root + os.sep):
                return p[len(root) + 1:]
        return p

    def lookthrough(frame: Any) -> bool:
        code = frame.f_code
        name = os.path.basename(code.co_filename)
        if kind_of(code.co_filename) not in ("stdlib", "library"):
            return False
        if name in lookthrough_files and kind_of(code.co_filename) == "stdlib":
            return True
        if name == "__init__.py" and code.co_filename.endswith(("logging" + os.sep + "__init__.py",)):
            return code.co_name in ("<lambda>", "currentframe")
        return code.co_filename.endswith("numpy" + os.sep + "distutils" + os.sep + "misc_util.py")

    def caller_frames() -> Any:
        """The Python frames of the audited call, innermost first (everything below the hook's frame)."""
        f: FrameType | None = getframe(1)
        while f is not None and f.f_code is not hook_code[0]:
            f = f.f_back
        f = f.f_back if f is not None else None
        while f is not None:
            if f.f_code not in skipped:
                yield f
            f = f.f_back

    def introspection_origin() -> str:
        for f in caller_frames():
            if not lookthrough(f):
                return kind_of(f.f_code.co_filename)
        return "stdlib"

    def capability_origin() -> tuple[str, str]:
        """(kind, file) of the first frame outside the standard library."""
        for f in caller_frames():
            fn = f.f_code.co_filename
            k = kind_of(fn)
            if k != "stdlib":
                return k, fn
        return "stdlib", ""

    def importing_real_file() -> bool:
        """compile/marshal.loads inside importlib's get_code for a plain file loader (file names honest)."""
        for f in caller_frames():
            code = f.f_code
            if not code.co_filename.startswith("<frozen importlib._bootstrap"):
                return False
            if code.co_name == "get_code":
                loader = f.f_locals.get("self")
                if type(loader) is SourceFileLoader:
                    return True
                if type(loader) is SourcelessFileLoader:
                    return kind_of(str(getattr(loader, "path", ""))) != "candidate"
                return False
        return False

    def refuse(what: str, why: str) -> None:
        message = f"{PREFIX} {what}: {why}"
        if message not in reported:
            reported.add(message)
            violations.append(message)
            try:
                err_write(2, (message + "\n").encode("utf-8", "replace"))
            except OSError:
                pass
        if fatal:                 # the judge sees the exit code even if fd 2 was silenced
            exit_now(REFUSED_EXIT)
        raise PermissionError(message)

    def resolve(path: Any, what: str) -> str:
        try:
            return _resolve(os.fsdecode(path))
        except UnresolvablePath as e:
            refuse(f"{what} {os.fsdecode(path)[:200]!r}", f"the path cannot be resolved for certain ({e.strerror or e})")
            raise

    def builder_origin(origins: tuple[str, ...]) -> bool:
        """Is the code asking (first frame outside the standard library) one of `origins`? ksearch's CUDA
        builder counts only when the harness called it (no candidate frame above it: a Python candidate that
        calls the builder on a source of its own gets no native code), and torch's extension builder only
        when ksearch's CUDA builder called it."""
        first = ""
        builder = False
        for f in caller_frames():
            fn = f.f_code.co_filename
            k = kind_of(fn)
            if k == "stdlib":
                continue
            rel = rel_to_site(fn) if k in ("library", "harness") else ""
            if not first:
                if k not in ("library", "harness"):
                    return False
                first = rel
                if not first.startswith(origins):
                    return False
                builder = first == CUDA_BUILDER
                if not builder and not first.startswith(BUILDER_GATED_ORIGINS):
                    return True
            elif not builder:
                builder = rel == CUDA_BUILDER
            elif k == "candidate":
                return False          # the CUDA builder, asked by the candidate
        return builder

    def check_write_path(event: str, path: Any) -> None:
        if isinstance(path, int) or path is None:
            return
        p = os.fsdecode(path) if isinstance(path, (str, bytes)) else None
        if p is None:
            refuse(event, f"a path of type {type(path).__name__} (only str and bytes paths may be written)")
        real = resolve(p, event)
        if real == "/dev/null":
            return
        if _under(real, writable):
            if capability_origin()[0] == "candidate":
                written.add(real)
            return
        refuse(f"{event} {p!r}", f"writing outside the scratch directory {scratch}")

    def on_open(args: tuple[Any, ...]) -> None:
        path, mode, flags = (tuple(args) + (None, None, None))[:3]
        if isinstance(path, int) or path is None:
            return
        if isinstance(path, (str, bytes)):
            real = resolve(path, "opening")
            if hidden and _under(real, hidden):
                refuse(f"reading the task's files: {os.fsdecode(path)[:200]!r}", "they belong to the judge")
            m = _PROC_PID.match(real)
            if m and m.group(1) != own_pid:
                refuse(f"opening {os.fsdecode(path)!r}", "other processes' /proc entries (memory, descriptors, "
                                                        "namespaces) are off limits")
        writing = (isinstance(flags, int) and flags & O_WRITE) or \
            (isinstance(mode, str) and any(c in mode for c in "wax+"))
        if writing:
            check_write_path("opening for writing", path)
            return
        if mode is None:      # os.open: a directory fd outside scratch would let dir_fd= dodge the check
            p = os.fsdecode(path) if isinstance(path, (str, bytes)) else ""
            real = resolve(p, "os.open") if p else ""
            if real and os.path.isdir(real) and not _under(real, writable):
                refuse(f"os.open of the directory {p!r}", "directory descriptors outside the scratch directory "
                                                          "would allow writing through dir_fd")

    def on_exec(event: str, args: tuple[Any, ...]) -> None:
        exe: Any = None
        if event == "subprocess.Popen":
            exe = args[0] or (list(args[1])[0] if args[1] else None)
        elif event in ("os.exec", "os.posix_spawn"):
            exe = args[0]
        elif event == "os.spawn":
            exe = args[1]
        elif event == "ksearch.fork_exec":
            exe = args[0]
        name = os.fsdecode(exe) if isinstance(exe, (str, bytes)) else str(exe)
        what = f"starting a process ({event} {name!r})"
        if not builder_origin(exec_origins):
            refuse(what, "processes may only be started by the toolchain's own code (triton; torch's extension "
                         "builder when ksearch's CUDA builder runs it), not by the candidate")
        resolved = shutil.which(name) if os.sep not in name else name
        real = resolve(resolved, what) if resolved else ""
        if real and _under(real, writable):
            refuse(what, "a program inside the scratch directory is the candidate's, whoever starts it")
        if {_unversioned(real or name), _unversioned(name)} & INTERPRETERS:
            refuse(what, "command interpreters run whatever they are handed; the toolchain never needs one")

    def on_native(event: str, path: Any) -> None:
        """Native code from a file: never one the candidate wrote; from the scratch folder only for the toolchain."""
        if not isinstance(path, (str, bytes)) or os.sep not in os.fsdecode(path):
            return                # a library found on the loader's own path, or none (the process itself)
        real = resolve(path, event)
        what = f"loading native code ({event} {os.fsdecode(path)!r})"
        if real in written:
            refuse(what, "the candidate wrote this file itself")
        if _under(real, writable) and not builder_origin(NATIVE_ORIGINS):
            refuse(what, "native code from the scratch folder is loaded only by the toolchain (Triton's launcher, "
                         "ksearch's CUDA builder), not for the candidate by a library it calls")

    def on_event(event: str, args: tuple[Any, ...]) -> None:
        if event == "open":
            on_open(args)
        elif event == "import":
            if args and args[0] in PROTECTED_MODULES:
                refuse(f"importing {args[0]} afresh", "a second copy of a module the sandbox watches")
        elif event == "ksearch.load_native":
            if len(args) > 0 and args[0] in PROTECTED_MODULES:
                refuse(f"creating the module {args[0]} afresh", "a second copy of a module the sandbox watches")
            on_native(event, args[1] if len(args) > 1 else None)
        elif event == "ctypes.dlopen":
            on_native(event, args[0] if args else None)
            if capability_origin()[0] != "library":
                refuse(event, "ctypes/cffi are not available to candidates")
        elif event == "ksearch.task_reference":
            refuse("computing the task's reference", "the reference belongs to the judge, not the candidate's process")
        elif event == "ksearch.shm_open":
            if capability_origin()[0] == "candidate":
                refuse(f"creating shared memory {args[0] if args else ''!r}", "candidates have no named shared "
                       "memory (it would outlive them, or reach another process)")
        elif event in ("os.chmod", "os.chown") and args and isinstance(args[0], int):
            refuse(event, "changing a file through a descriptor")
        elif event in _PATH_EVENTS:
            for i in _PATH_EVENTS[event]:
                if i < len(args):
                    check_write_path(event, args[i])
        elif event == "sqlite3.connect":
            if args and args[0] not in (":memory:", b":memory:", ""):
                check_write_path(event, args[0])
        elif event == "socket.__new__":
            family = args[1] if len(args) > 1 else None
            if family not in (socket_module.AF_UNIX, -1, None):
                refuse(f"creating a socket (family {family})", "candidates have no network")
        elif event in _SOCKET_EVENTS:
            refuse(event, "candidates have no network")
        elif event in ("os.system", "os.fork", "os.forkpty", "pty.spawn"):
            refuse(event, "candidates may not start processes")
        elif event in ("os.kill", "os.killpg", "signal.pthread_kill"):
            refuse(event, "candidates may not send signals")
        elif event in ("subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "ksearch.fork_exec"):
            on_exec(event, args)
        elif event.startswith(("ctypes.", "cffi.")):
            kind, _ = capability_origin()
            if kind != "library":
                refuse(event, "ctypes/cffi are not available to candidates")
        elif event in _INTROSPECTION:
            if introspection_origin() == "candidate":
                refuse(event, "frame and gc introspection are not available to candidates")
        elif event == "object.__getattr__":
            if len(args) > 1 and args[1] in _FRAME_ATTRS and introspection_origin() == "candidate":
                refuse(f"reading .{args[1]}", "frames are not available to candidates")
        elif event == "object.__setattr__":
            if len(args) > 1 and args[1] == "__code__" and introspection_origin() == "candidate":
                refuse("replacing a function's __code__", "code injection")
        elif event in ("compile", "code.__new__"):
            filename = args[1] if len(args) > 1 else None
            if isinstance(filename, (str, bytes)):
                fn = os.fsdecode(filename)
                if kind_of(fn) != "candidate" and capability_origin()[0] != "library" and not importing_real_file():
                    refuse(f"{event} with file name {fn!r}", "code may not claim to be the standard library, a "
                                                             "library or the evaluator")
        elif event == "marshal.loads":
            if capability_origin()[0] != "library" and not importing_real_file():
                refuse(event, "loading code objects is not available to candidates")

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event not in _WATCHED and not event.startswith(("ctypes.", "cffi.")):
            return
        me = get_ident()
        if me in busy:            # events raised by the hook's own work (getframe, realpath)
            return
        busy.add(me)
        try:
            on_event(event, args)
        except PermissionError:
            raise
        except BaseException as e:  # noqa: BLE001 - the check itself failed: refuse rather than let it pass
            if fatal:
                try:
                    err_write(2, f"{PREFIX} {event}: the sandbox could not check it ({type(e).__name__})\n".encode())
                finally:
                    exit_now(REFUSED_EXIT)
            raise PermissionError(f"{PREFIX} {event}: the sandbox could not check it ({type(e).__name__}: {e})") \
                from None
        finally:
            busy.discard(me)

    hook_code.append(hook.__code__)
    return hook, skipped


# event -> indices of its path arguments that must stay inside the writable roots
_PATH_EVENTS: dict[str, tuple[int, ...]] = {
    "os.mkdir": (0,), "os.remove": (0,), "os.rmdir": (0,), "os.rename": (0, 1), "os.link": (0, 1),
    "os.symlink": (1,), "os.truncate": (0,), "os.utime": (0,), "os.mkfifo": (0,), "os.mknod": (0,),
    "os.setxattr": (0,), "os.removexattr": (0,), "os.chflags": (0,), "os.lchflags": (0,),
    "shutil.rmtree": (0,), "shutil.copyfile": (1,), "shutil.copymode": (1,), "shutil.copystat": (1,),
    "shutil.move": (0, 1),
}
_PATH_EVENTS_CHMOD = {"os.chmod": (0,), "os.chown": (0,), "os.lchown": (0,)}
_PATH_EVENTS.update(_PATH_EVENTS_CHMOD)
_SOCKET_EVENTS = frozenset({"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
                            "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo",
                            "socket.sethostname", "urllib.Request", "http.client.connect", "ftplib.connect",
                            "smtplib.connect", "poplib.connect", "imaplib.open", "nntplib.connect",
                            "telnetlib.Telnet.open", "webbrowser.open"})
_INTROSPECTION = frozenset({"sys._getframe", "sys._current_frames", "sys._current_exceptions", "gc.get_objects",
                            "gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile",
                            "sys.addaudithook", "sys._getframemodulename", "sys.monitoring.register_callback"})
_FRAME_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame"})
_WATCHED = frozenset({"open", "sqlite3.connect", "socket.__new__", "os.system", "os.fork", "os.forkpty", "pty.spawn",
                      "os.kill", "os.killpg", "signal.pthread_kill", "subprocess.Popen", "os.exec", "os.posix_spawn",
                      "os.spawn", "object.__getattr__", "object.__setattr__", "compile", "code.__new__",
                      "marshal.loads", "import", "ksearch.fork_exec", "ksearch.load_native", "ksearch.shm_open",
                      "ksearch.task_reference"}) \
    | _SOCKET_EVENTS | _INTROSPECTION | frozenset(_PATH_EVENTS)
