"""A fork server ("zygote"): a fresh, contained process for every candidate, for tens of milliseconds.

Why: a candidate that shares a process with anything that decides its verdict can reach it, and one that
keeps its process can poison the next candidate. Spawning a fresh interpreter per candidate costs seconds
(importing torch and triton); forking a process that has already imported them costs milliseconds.

Interface (for the evaluator)
-----------------------------
    from ksearch.eval.isolation.forkserver import ForkServer
    from ksearch.eval.candidate.audit import AuditPolicy

    server = ForkServer(preload=["ksearch.eval.candidate.harness"], interpret=True, memory_limit_bytes=None)
    child = server.spawn("ksearch.eval.candidate.harness:serve", payload, scratch_dir,
                         audit=AuditPolicy(scratch_dir=str(scratch_dir)))
    child.conn.send(...); reply = child.conn.recv() if child.conn.poll(timeout) else None
    code = child.wait(timeout)          # exit code, -signal, or None while it runs
    child.kill()                        # it and every process it started are gone when this returns
    child.groups                        # its control groups, () where there are none (ksearch.eval.isolation.stopping)
    child.namespace                     # its PID namespace (pidtree.Namespace: init and fork server), None without one
    child.exit_description()            # "exited, exit code 0" / "killed by SIGSEGV (segmentation fault)"
    text, nbytes = child.output()       # first 4 KiB and last 12 KiB of its fd 1 and 2
    child.audit_violations()            # "ksearch-audit: refused ..." lines, read from the stream as it flowed
    server.close()                      # kills the zygote and every child

- The zygote is started like sandbox.WorkerProcess: a fresh interpreter (subprocess.Popen) in its own
  session, dying with the process that started it (PR_SET_PDEATHSIG), output drained into a capped
  capture. It imports numpy, torch, triton, ksearch.eval.candidate.audit and `preload`, and switches the Triton
  interpreter on when `interpret`; it never initialises CUDA (no torch.cuda calls), so every child can.
- `spawn(target, payload, scratch_dir)` forks one child that, before anything else runs: moves its fd 1/2
  to its own capped pipe, keeps only fd 0-2 and its connection (fd 3), dies with the zygote, starts its
  own session, points TMPDIR and the Triton/torch/CUDA/XDG caches into `scratch_dir` and makes it the
  working directory. It then receives `payload` over `conn` (sent by spawn), installs the audit hook when
  `audit` is given (ksearch.eval.candidate.audit: before any candidate code is imported), imports `target`
  ("module:function") and calls target(conn, payload). Returning exits 0; an exception prints its
  traceback to the captured stderr and exits 1; SystemExit keeps its code.
- `conn` is a multiprocessing Connection on a socket pair between the caller of spawn and the child:
  the zygote only passes the child's end on (SCM_RIGHTS) and never sees the traffic. Under the audit
  hook, send tensors as `conn.send_bytes(pickle.dumps(x))` (a plain pickle copies the storage):
  `conn.send(tensor)` goes through torch's multiprocessing reductions, which open a socket listener
  (multiprocessing.resource_sharer) and are refused. The child may write anything to its end, so the
  judge must treat what it reads as untrusted data (a per-job token, size limits, plain types only).
- Harness code that runs in the child after the hook (the target) belongs in ksearch/: the hook counts
  files of the ksearch package as the evaluator's, and files anywhere else (tests/, the scratch dir,
  "<string>") as candidate code. Preload the target's module: importing it in every child costs time.
- Control groups (ksearch.eval.isolation.cgroups, `cgroups=True`, the default, part of the walls): one per
  child where the host lets root make one; `cgroups=False` makes none (tests of what the judge does without).
- Walls (ksearch.eval.isolation.walls, `walls=True`, the default): the zygote probes once what the kernel allows
  (`walls_plan`, described in `isolation_note`), and every child applies it right after the fork: its own
  mount namespace (read-only, a tmpfs scratch of `scratch_bytes`, a private /dev/shm, `hidden` folders
  covered), an unprivileged uid where it can read what it needs, no capabilities, Landlock, seccomp.
  `spawn(..., tasks=, hidden=, seeds=)`: TaskSnapshots pinned in the child before the target runs (it
  never reads the task's folder), folders its mount namespace hides, folders copied into its scratch (the
  copy happens in the child, since its scratch is a tmpfs of its own). The child's environment loses
  variables that look like credentials (*KEY*, *TOKEN*, *SECRET*...).
- What the child can still read: what its uid may read outside the veiled and hidden folders (the run
  directory included). Keep reference outputs in the judge's memory, never in files the candidate could
  open; give the child shared memory for its outputs as a descriptor over conn.
- Reaping: see ksearch.eval.isolation.reaper. With isolation "namespaces" (the default where permitted) the child
  is PID 2 of its own PID namespace (PID 1 is a do-nothing init, so the child keeps ordinary signal
  semantics) and has its own, empty network namespace; when the child ends or is killed, the namespace's
  init is killed and the kernel kills everything left in it; where the kernel allows it the child also
  has a mount namespace with its own /proc (the judge's /proc/PID cannot be named). Every child then
  gives up all capabilities (bounding set included) and sets no_new_privs (`drop_capabilities=True`, the
  default): native code cannot mount, unshare, setns, ptrace or load modules (and the seccomp filter kills a
  process that tries). The judge stops a candidate without a control group by its namespace's process tree
  (`child.namespace`, ksearch.eval.isolation.pidtree). With "subreaper" the zygote reaps and kills every
  orphan. Either way `wait()` reports the exit only after the child's descendants are gone.
- If the zygote dies, its children die with it (PR_SET_PDEATHSIG) and the next spawn starts a new one.

The per-child overhead (fork, namespaces, set-up, until target runs, plus reaping) is measured by
tests/test_forkserver.py::test_overhead; tests/test_forkserver_gpu.py does the same with CUDA init on a GPU.
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import pickle
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ksearch.eval.isolation import cgroups, pidtree, reaper
from ksearch.eval.parent.worker_handle import OutputCapture, describe_exit

AUDIT_PREFIX = "ksearch-audit: refused"
ISOLATIONS = ("auto", "namespaces", "subreaper")
CACHE_VARS = {"TRITON_CACHE_DIR": "triton", "TORCHINDUCTOR_CACHE_DIR": "inductor",
              "TORCH_EXTENSIONS_DIR": "torch_extensions", "CUDA_CACHE_PATH": "cuda", "XDG_CACHE_HOME": "xdg",
              "KSEARCH_CUDA_BUILD_DIR": "cuda_builds", "TMPDIR": "tmp", "TEMP": "tmp", "TMP": "tmp", "HOME": "home"}
_MSG_MAX = 1 << 16
_CONN_FD = 3


class ForkServerError(RuntimeError):
    """The zygote did not start or stopped answering; the message carries its output."""


# ---------------------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------------------
class ChildOutput(OutputCapture):
    """OutputCapture that also collects audit refusal lines from the whole stream, not only head and tail."""

    MAX_LINES = 200

    def __init__(self, fd: int):
        self.audit_lines: list[str] = []
        self._carry = b""
        super().__init__(fd)

    def _commit(self, data: bytes) -> None:
        super()._commit(data)
        if not data:
            return
        buf = self._carry + data
        lines = buf.split(b"\n")
        self._carry = lines.pop()[-1024:]
        prefix = AUDIT_PREFIX.encode()
        for line in lines:
            if line.startswith(prefix) and len(self.audit_lines) < self.MAX_LINES:
                text = line.decode("utf-8", "replace")
                if text not in self.audit_lines:
                    self.audit_lines.append(text)


@dataclass
class Child:
    """One candidate process, seen from the caller of spawn."""

    id: int
    pid: int
    conn: Connection
    capture: ChildOutput
    server: ForkServer
    groups: tuple[str, ...] = ()    # its control groups (ksearch.eval.isolation.cgroups): () where none are made
    namespace: pidtree.Namespace | None = None      # its PID namespace ("namespaces" isolation), by its init
    spawned_at: float = field(default_factory=time.perf_counter)
    returncode: int | None = None
    ended_at: float | None = None
    _done: threading.Event = field(default_factory=threading.Event)

    def _finish(self, code: int) -> None:
        if not self._done.is_set():
            self.returncode = code
            self.ended_at = time.perf_counter()
            self._done.set()

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit code (-signal when killed) once the child and all its descendants are gone, else None."""
        self._done.wait(timeout)
        return self.returncode

    def alive(self) -> bool:
        return not self._done.is_set()

    def kill(self, timeout: float = 10.0) -> int | None:
        """SIGKILL the child and everything it started; returns once they are gone (or `timeout` passed)."""
        if not self._done.is_set():
            self.server._request_kill(self)
            self._done.wait(timeout)
        try:
            self.conn.close()
        except OSError:
            pass
        return self.returncode

    def exit_description(self) -> str:
        return describe_exit(self.returncode)

    def output(self, eof_timeout: float = 2.0) -> tuple[str, int]:
        """(excerpt of fd 1 and 2: first 4 KiB, last 12 KiB; total bytes). Waits briefly for EOF once exited."""
        if self._done.is_set():
            self.capture.eof.wait(eof_timeout)
        return self.capture.excerpt()

    def audit_violations(self) -> list[str]:
        """The audit hook's refusals, as written to the child's stderr (ksearch.eval.candidate.audit)."""
        if self._done.is_set():
            self.capture.eof.wait(2.0)
        with self.capture.lock:
            return list(self.capture.audit_lines)


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[3])


class ForkServer:
    """Owns one zygote process; thread-safe spawn/kill; restarts the zygote when it has died."""

    def __init__(self, preload: list[str] | None = None, interpret: bool = False,
                 memory_limit_bytes: int | None = None, isolation: str = "auto", startup_timeout: float = 300.0,
                 drop_capabilities: bool = True, private_proc: bool = True, walls: bool = True,
                 scratch_bytes: int | None = None, shm_bytes: int | None = None, cgroups: bool = True,
                 cpus: tuple[int, ...] | None = None):
        if isolation not in ISOLATIONS:
            raise ValueError(f"isolation must be one of {ISOLATIONS}, not {isolation!r}")
        self.preload = list(preload or [])
        self.interpret = interpret
        self.memory_limit_bytes = memory_limit_bytes
        self.requested_isolation = isolation
        self.drop_capabilities = drop_capabilities
        self.private_proc = private_proc      # False: keep the host's /proc (should a driver need it)
        self.walls = walls                    # False: none of ksearch.eval.isolation.walls (tests that need the host's view)
        self.cgroups = cgroups                # False: no control groups even where root may make them
        self.cpus = cpus                      # the zygote's and its children's CPUs (ksearch.eval.isolation.cpus)
        self.scratch_bytes = scratch_bytes
        self.shm_bytes = shm_bytes
        self.walls_plan: Any = None           # the walls.WallsPlan the zygote probed
        self.startup_timeout = startup_timeout
        self.isolation: str = ""
        self.isolation_note: str = ""
        self.zygote_pid: int = 0
        self.startup_s: float = 0.0
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._children: dict[int, Child] = {}
        self._pending: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._early_exits: dict[int, int] = {}
        self._restart_lock = threading.Lock()
        self._closed = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._start()

    # ---- the zygote ---------------------------------------------------------------------------------------
    def _start(self) -> None:
        t0 = time.perf_counter()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join([_package_root()] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        if self.interpret:
            env["TRITON_INTERPRET"] = "1"
            for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                env.setdefault(var, "1")
        else:
            env.pop("TRITON_INTERPRET", None)
        config = {"fd": theirs.fileno(), "parent": os.getpid(), "interpret": self.interpret,
                  "memory_limit": self.memory_limit_bytes, "preload": self.preload,
                  "isolation": self.requested_isolation, "drop_capabilities": self.drop_capabilities,
                  "private_proc": self.private_proc, "walls": self.walls, "scratch_bytes": self.scratch_bytes,
                  "shm_bytes": self.shm_bytes, "cgroups": self.cgroups,
                  "cpus": list(self.cpus) if self.cpus else None}
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "ksearch.eval.isolation.zygote", json.dumps(config)],
                stdin=subprocess.DEVNULL, stdout=write_fd, stderr=write_fd, pass_fds=(theirs.fileno(),),
                start_new_session=True, env=env, close_fds=True)
        finally:
            os.close(write_fd)
            theirs.close()
        self._sock = ours
        self._capture = OutputCapture(read_fd)
        ready = self._recv_startup()
        if ready is None:
            self._kill_zygote()
            self._capture.eof.wait(2.0)
            out, _ = self._capture.excerpt()
            raise ForkServerError(f"the fork server did not start within {self.startup_timeout:.0f}s "
                                  f"({describe_exit(self._proc.poll())}); its output:\n{out[-4000:]}")
        self.zygote_pid = self._proc.pid
        self.isolation, self.isolation_note = ready["isolation"], ready["note"]
        if self.cpus:
            self.isolation_note += f"; candidates on {len(self.cpus)} CPUs of their own"
        from ksearch.eval.isolation import walls as walls_module
        self.walls_plan = walls_module.from_json(ready["walls"]) if ready.get("walls") else None
        if self.walls_plan is not None:
            if self.walls_plan.mount == "userns":          # its user namespace has an empty network namespace
                self.isolation_note = self.isolation_note.replace(" (no network isolation)", "")
            self.isolation_note += "; walls: " + self.walls_plan.describe()
            walls_module.set_current(self.walls_plan)
        self.startup_s = time.perf_counter() - t0
        self._reader = threading.Thread(target=self._read_loop, args=(self._sock, self._proc),
                                        name="ksearch-forkserver", daemon=True)
        self._reader.start()

    def _recv_startup(self) -> dict[str, Any] | None:
        sel = selectors.DefaultSelector()
        sel.register(self._sock, selectors.EVENT_READ)
        try:
            if not sel.select(self.startup_timeout):
                return None
            data = self._sock.recv(_MSG_MAX)
        except OSError:
            return None
        finally:
            sel.close()
        if not data:
            return None
        msg = pickle.loads(data)
        if msg[0] == "failed":
            self._kill_zygote()
            raise ForkServerError(msg[2])
        return msg[1] if msg[0] == "ready" else None

    def _read_loop(self, sock: socket.socket, proc: subprocess.Popen[bytes]) -> None:
        while True:
            try:
                data = sock.recv(_MSG_MAX)
            except OSError:
                data = b""
            if not data:
                break
            msg = pickle.loads(data)       # the zygote runs only our code: its messages are trusted
            kind, cid = msg[0], msg[1]
            with self._lock:
                if kind in ("spawned", "failed") and cid in self._pending:
                    event, box = self._pending.pop(cid)
                    box.append(msg)
                    event.set()
                elif kind == "exited":
                    if cid in self._children:
                        self._children.pop(cid)._finish(msg[2])
                    else:                     # it ended before spawn() registered it
                        self._early_exits[cid] = msg[2]
        self._zygote_gone(proc)

    def _zygote_gone(self, proc: subprocess.Popen[bytes]) -> None:
        """The zygote ended: its children die with it (PR_SET_PDEATHSIG); make sure, then report them."""
        with self._lock:
            children, self._children = self._children, {}
            pending, self._pending = self._pending, {}
        for child in children.values():
            reaper.kill_quietly(child.pid)
        for event, box in pending.values():
            box.append(("failed", 0, "the fork server died"))
            event.set()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        for child in children.values():
            child._finish(-signal.SIGKILL)

    def _kill_zygote(self) -> None:
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            pass

    def zygote_alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def zygote_output(self) -> str:
        return self._capture.excerpt()[0]

    def _send(self, msg: Any, fds: list[int] | None = None) -> None:
        data = pickle.dumps(msg)
        if len(data) > _MSG_MAX:
            raise ValueError("fork-server request too large (send big payloads over the child's conn)")
        if fds:
            socket.send_fds(self._sock, [data], fds)
        else:
            self._sock.send(data)

    # ---- children ----------------------------------------------------------------------------------------
    def spawn(self, target: str, payload: Any, scratch_dir: str | os.PathLike[str], *,
              audit: Any = None, env: dict[str, str] | None = None, timeout: float = 30.0,
              tasks: list[Any] | None = None, hidden: list[str] | tuple[str, ...] = (),
              seeds: dict[str, str] | None = None) -> Child:
        """Fork a child that runs target(conn, payload); `audit` is an audit.AuditPolicy or None.

        `tasks`: TaskSnapshots pinned in the child before the target runs (it never reads the task's folder);
        `hidden`: folders its mount namespace covers; `seeds`: {sub-folder: folder} copied into its scratch."""
        if self._closed:
            raise ForkServerError("the fork server is closed")
        if ":" not in target:
            raise ValueError(f"target must be 'module:function', not {target!r}")
        with self._restart_lock:
            if not self.zygote_alive():
                self._reader.join(10)
                self._start()
        scratch = Path(scratch_dir).resolve()
        scratch.mkdir(parents=True, exist_ok=True)
        seed_pairs = tuple(sorted((seeds or {}).items()))
        if seed_pairs and self.walls_plan is None:         # no walls: copied here, before the child starts
            for sub, src in seed_pairs:
                shutil.copytree(src, scratch / sub, dirs_exist_ok=True)
            seed_pairs = ()
        if tasks:
            payload = _WithTasks(payload, list(tasks))
        cid = next(self._ids)
        ours, theirs = socket.socketpair()
        read_fd, write_fd = os.pipe()
        event = threading.Event()
        box: list[Any] = []
        with self._lock:
            self._pending[cid] = (event, box)
        try:
            self._send(("spawn", cid, target, str(scratch), dict(env or {}), audit, tuple(hidden), seed_pairs),
                       [theirs.fileno(), write_fd])
        except OSError as e:
            with self._lock:
                self._pending.pop(cid, None)
            ours.close()
            os.close(read_fd)
            raise ForkServerError(f"the fork server did not take the request ({e})") from e
        finally:
            theirs.close()
            os.close(write_fd)
        capture = ChildOutput(read_fd)
        conn = Connection(ours.detach())
        if not event.wait(timeout) or not box or box[0][0] != "spawned":
            conn.close()
            why = box[0][2] if box else f"no answer within {timeout:.0f}s"
            raise ForkServerError(f"the fork server could not start a child: {why}")
        # ("spawned", cid, pid, control groups, PID namespace)
        spawned: tuple[str, int, int, tuple[str, ...], pidtree.Namespace | None] = box[0]
        child = Child(cid, spawned[2], conn, capture, self, groups=spawned[3], namespace=spawned[4])
        with self._lock:
            if cid in self._early_exits:
                child._finish(self._early_exits.pop(cid))
            else:
                self._children[cid] = child
        try:
            conn.send(payload)
        except OSError:
            pass        # it died before reading: wait() and output() say how
        return child

    def _request_kill(self, child: Child) -> None:
        try:
            self._send(("kill", child.id))
        except OSError:
            reaper.kill_quietly(child.pid)

    def children(self) -> list[Child]:
        with self._lock:
            return list(self._children.values())

    def close(self) -> None:
        """Kill every child (and their descendants), then the zygote."""
        if self._closed:
            return
        self._closed = True
        proc = self._proc
        if proc is not None and self.zygote_alive():
            try:
                self._send(("close", 0))
                proc.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill_zygote()
        self._reader.join(15)
        try:
            self._sock.close()
        except OSError:
            pass

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self._kill_zygote()


# ---------------------------------------------------------------------------------------------------------
# Zygote side
# ---------------------------------------------------------------------------------------------------------
@dataclass
class _Record:
    cid: int
    pid: int
    init: int | None            # the namespace's init (namespaces mode)
    status: int | None = None   # the child's exit code once reaped
    groups: tuple[str, ...] = ()    # its control groups (ksearch.eval.isolation.cgroups), removed once it is gone


class Zygote:
    """The fork server's loop: imports done, no threads of its own, forks on request, reaps, reports."""

    def __init__(self, sock: socket.socket, isolation: str, private_proc: bool = False, drop_caps: bool = True,
                 walls_plan: Any = None, cgroup_plan: Any = None):
        self.sock = sock
        self.walls_plan = walls_plan
        self.cgroup_plan = cgroup_plan
        self.drop_caps = drop_caps
        self.isolation = isolation
        self.private_proc = private_proc
        self.me = os.getpid()
        self.records: dict[int, _Record] = {}
        self.by_pid: dict[int, _Record] = {}
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w)
        self.own_ns: dict[int, int] = {}
        if isolation == "namespaces":
            self.own_ns = {reaper.CLONE_NEWPID: os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC),
                           reaper.CLONE_NEWNET: os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)}
        self.init_argv = _init_argv()

    def send(self, msg: Any) -> None:
        self.sock.send(pickle.dumps(msg))

    def serve(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.sock, selectors.EVENT_READ, "ctrl")
        sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        while True:
            for key, _ in sel.select():
                if key.data == "wake":
                    try:
                        while os.read(self.wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                    self.reap()
                    continue
                try:
                    data, fds, _, _ = socket.recv_fds(self.sock, _MSG_MAX, 4)
                except OSError:
                    data, fds = b"", []
                if not data:
                    self.shutdown()
                    return
                msg = pickle.loads(data)
                if msg[0] == "spawn":
                    self.spawn(msg, fds)
                elif msg[0] == "kill":
                    self.kill(msg[1])
                elif msg[0] == "close":
                    self.shutdown()
                    return
            self.reap()

    # ---- forking -----------------------------------------------------------------------------------------
    def spawn(self, msg: tuple[Any, ...], fds: list[int]) -> None:
        _, cid, target, scratch, env, audit, hidden, seeds = msg
        conn_fd, out_fd = fds
        for fd in fds:
            os.set_inheritable(fd, False)     # an exec'd init must not hold the child's pipe or socket
        groups: tuple[str, ...] = ()
        try:
            if self.cgroup_plan is not None:
                groups = cgroups.make(self.cgroup_plan, f"{cgroups.PREFIX}{self.me}_c{cid}")
            spec = (target, scratch, env, audit, hidden, seeds, groups)
            if self.isolation == "namespaces":
                pid, init = self._fork_in_namespaces(conn_fd, out_fd, spec)
            else:
                pid, init = self._fork(conn_fd, out_fd, spec), None
        except Exception as e:  # noqa: BLE001 - any failure to fork is this child's failure, reported to the parent
            cgroups.remove(groups)
            self.send(("failed", cid, f"{type(e).__name__}: {e}"))
            return
        finally:
            os.close(conn_fd)
            os.close(out_fd)
        rec = _Record(cid, pid, init, groups=groups)
        self.records[cid] = rec
        self.by_pid[pid] = rec
        if init is not None:
            self.by_pid[init] = rec
        namespace = pidtree.Namespace(init, self.me) if init is not None else None
        self.send(("spawned", cid, pid, groups, namespace))

    def _fork(self, conn_fd: int, out_fd: int, spec: tuple[Any, ...]) -> int:
        pid = os.fork()
        if pid == 0:
            _child_main(conn_fd, out_fd, spec, zygote=self.me, new_pid_ns=self.isolation == "namespaces",
                        private_proc=self.private_proc, drop_caps=self.drop_caps, walls_plan=self.walls_plan)
        return pid

    def _fork_in_namespaces(self, conn_fd: int, out_fd: int, spec: tuple[Any, ...]) -> tuple[int, int]:
        """New PID+net namespaces for our next children: an init (PID 1), then the child (PID 2)."""
        reaper.unshare(reaper.CLONE_NEWPID | reaper.CLONE_NEWNET)
        try:
            init = self._start_init()
            pid = self._fork(conn_fd, out_fd, spec)
        finally:
            for nstype, fd in self.own_ns.items():       # our own later children go where we are again
                if reaper.libc().setns(fd, nstype) != 0:
                    os._exit(70)                          # cannot happen as root; never fork in a stale ns
        return pid, init

    def _start_init(self) -> int:
        """PID 1 of the new namespace: holds it open, dies with us; killed when the child ends."""
        if self.init_argv:
            return os.posix_spawn(self.init_argv[0], self.init_argv, {"PATH": "/usr/bin:/bin"})
        pid = os.fork()
        if pid == 0:              # no setpriv here: a forked init that dies with us and reaps orphans
            try:
                reaper.die_with_parent()
                os.closerange(3, _max_fd())
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                while True:
                    try:
                        os.wait()
                    except ChildProcessError:
                        signal.pause()
            finally:
                os._exit(0)
        return pid

    # ---- ending ------------------------------------------------------------------------------------------
    def kill(self, cid: int) -> None:
        rec = self.records.get(cid)
        if rec is None:
            return
        if rec.status is None:
            if rec.init is None:
                reaper.kill_tree(rec.pid)
            else:
                reaper.kill_quietly(rec.pid)
        if rec.init is not None:
            reaper.kill_quietly(rec.init)

    def reap(self) -> None:
        for pid, status in reaper.reap_all():
            self._reaped(pid, status)

    def _reaped(self, pid: int, status: int) -> None:
        rec = self.by_pid.pop(pid, None)
        if rec is None:
            return                       # a stray (subreaper mode); swept below
        if pid == rec.pid:
            rec.status = reaper.exit_code(status)
            if rec.init is None:
                self._sweep()
        elif rec.status is None:
            # the namespace's init died first: the kernel killed the child too; it is reaped next
            reaper.kill_quietly(rec.pid)
        if rec.init is not None and rec.init in self.by_pid:
            reaper.kill_quietly(rec.init)          # the kernel then kills the rest of the namespace
            return
        if rec.pid not in self.by_pid and rec.status is not None and rec.cid in self.records:
            self.records.pop(rec.cid)
            cgroups.remove(rec.groups)
            self.send(("exited", rec.cid, rec.status))

    def _sweep(self) -> None:
        """Subreaper mode: kill and reap every process we did not start (orphans re-parented to us)."""
        keep = set(self.by_pid)
        for pid, status in reaper.sweep_strays(self.me, keep):
            if pid in self.by_pid:
                self._reaped(pid, status)

    def shutdown(self) -> None:
        for rec in list(self.records.values()):
            self.kill(rec.cid)
        deadline = time.monotonic() + 10
        while self.by_pid and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.005)
        reaper.sweep_strays(self.me, set())


def _init_argv() -> list[str]:
    """`setpriv --pdeathsig KILL sleep infinity`: an exec'd init that dies with the zygote, cheap to start."""
    for setpriv in ("/usr/bin/setpriv", "/bin/setpriv"):
        for sleep in ("/usr/bin/sleep", "/bin/sleep"):
            if os.access(setpriv, os.X_OK) and os.access(sleep, os.X_OK):
                return [setpriv, "--pdeathsig", "KILL", "--", sleep, "infinity"]
    return []


def _child_main(conn_fd: int, out_fd: int, spec: tuple[Any, ...], zygote: int, new_pid_ns: bool,
                private_proc: bool = False, drop_caps: bool = False, walls_plan: Any = None) -> None:
    """In the forked child: contain, set up, receive the payload, audit, run the target. Never returns."""
    code = 70
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        if conn_fd != _CONN_FD:
            os.dup2(conn_fd, _CONN_FD)
        os.closerange(_CONN_FD + 1, _max_fd())
        reaper.die_with_parent()
        if not new_pid_ns and os.getppid() != zygote:
            os._exit(71)                  # the zygote died before we asked to die with it
        os.setsid()
        target, scratch, env, audit, hidden, seeds, groups = spec
        cgroups.join(groups)              # first: every process the child starts is counted there too
        if walls_plan is not None:        # probed at start: a failure here fails the child, never silently
            from ksearch.eval.isolation import walls
            walls.apply(walls_plan, walls.ChildWalls(scratch, tuple(hidden), tuple(seeds)))
        else:
            if private_proc:
                reaper.make_private_proc()
            if drop_caps:
                reaper.drop_capabilities()
        _scrub_secrets()
        _set_up_environment(Path(scratch), env)
        import faulthandler
        faulthandler.enable(all_threads=True)
        conn = Connection(_CONN_FD)
        payload = conn.recv()
        if isinstance(payload, _WithTasks):
            from ksearch.task import snapshot
            for snap in payload.tasks:
                snapshot.pin(snap)
            payload = payload.payload
        if audit is not None:
            from ksearch.eval.candidate import audit as audit_module
            audit_module.install_policy(audit)
        module_name, _, func_name = target.partition(":")
        func = getattr(importlib.import_module(module_name), func_name)
        func(conn, payload)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - the child's code may raise anything: exit code 1
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001 - the exit code still says it
            pass
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001 - a closed stream must not stop os._exit
                pass
        os._exit(code)


@dataclass
class _WithTasks:
    """A payload plus the task snapshots the child pins before its target runs."""

    payload: Any
    tasks: list[Any]


_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE")


def _scrub_secrets() -> None:
    """The candidate has no business with the user's credentials (API keys in the environment)."""
    for name in list(os.environ):
        if any(word in name.upper() for word in _SECRET_WORDS):
            del os.environ[name]


def _max_fd() -> int:
    try:
        return max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1
    except (OSError, ValueError):
        return 4096


def _set_up_environment(scratch: Path, env: dict[str, str]) -> None:
    """Caches and temporary files into the scratch directory, then the caller's own variables."""
    for var, sub in CACHE_VARS.items():
        path = scratch / sub
        path.mkdir(parents=True, exist_ok=True)
        os.environ[var] = str(path)
    os.environ.update(env)
    import tempfile
    tempfile.tempdir = None               # gettempdir() may have cached the zygote's answer
    os.chdir(scratch)


def zygote_main(argv: list[str] | None = None) -> None:
    argv = sys.argv if argv is None else argv
    config = json.loads(argv[1])
    sock = socket.socket(fileno=int(config["fd"]))
    sock.set_inheritable(False)
    try:
        reaper.die_with_parent()
        if os.getppid() != int(config["parent"]):
            os._exit(1)
        reaper.become_subreaper()
        from ksearch.eval.trusted.memory import limit_process

        limit_process(config.get("memory_limit") if config.get("interpret") else None)
        isolation, note, private_proc = config["isolation"], "", False
        if isolation in ("auto", "namespaces"):
            ok, note = reaper.namespaces_available()
            if not ok and isolation == "namespaces":
                raise RuntimeError(f"isolation='namespaces' is not available here: {note}")
            isolation = "namespaces" if ok else "subreaper"
            if not ok:
                note += "; falling back to a child subreaper (no network isolation)"
            elif not config.get("private_proc", True):
                note += "; the host's /proc stays visible (private_proc=False)"
            elif reaper.private_proc_available():
                note += ", a private /proc"
                private_proc = True
            else:
                note += "; the host's /proc stays visible (a new proc mount was refused)"
        else:
            note = "child subreaper (namespaces not requested)"
        t0 = time.perf_counter()
        _preload(config)
        import_s = time.perf_counter() - t0
        if config.get("cpus"):
            from ksearch.eval.isolation.cpus import run_on
            run_on(config["cpus"])      # inherited by every child forked from here
        plan, cgroup_plan = None, None
        if config.get("walls", True):
            # Probed after the imports, so that each probe child is what a candidate will be: forked from
            # this process as it serves (it starts CUDA where there is a GPU; this process never does).
            from ksearch.eval.isolation import walls
            sizes = {k: config[k] for k in ("scratch_bytes", "shm_bytes") if config.get(k)}
            plan = walls.probe(isolation == "namespaces", private_proc,
                               drop_caps=bool(config.get("drop_capabilities", True)), **sizes)
            if plan.seccomp:
                from ksearch.eval.isolation import seccomp
                seccomp.build()           # assembled once here; every child inherits it
            cgroup_plan, why = (cgroups.probe(config.get("memory_limit") if config.get("interpret") else None)
                                if config.get("cgroups", True) else (None, "no control groups (not asked for)"))
            if cgroup_plan is not None:
                cgroups.remove_stale(cgroup_plan, reaper.alive)
            if why:
                from ksearch.eval.isolation import stopping
                why += f" ({stopping.fallback(isolation == 'namespaces')})"
            plan = replace(plan, cgroups=cgroup_plan.describe() if cgroup_plan else "",
                           notes=plan.notes + ((why,) if why else ()))
        threads = len(os.listdir("/proc/self/task"))
        sock.send(pickle.dumps(("ready", {"isolation": isolation, "note": note, "threads": threads,
                                          "import_s": import_s,
                                          "walls": walls.to_json(plan) if plan is not None else None})))
    except BaseException as e:  # noqa: BLE001 - any start failure is reported to the parent before exiting
        traceback.print_exc()
        try:
            sock.send(pickle.dumps(("failed", 0, f"the fork server could not start: {type(e).__name__}: {e}")))
        except OSError:
            pass
        os._exit(3)
    Zygote(sock, isolation, private_proc, bool(config.get("drop_capabilities", True)), plan, cgroup_plan).serve()
    os._exit(0)


def _preload(config: dict[str, Any]) -> None:
    """Import what every child needs, without initialising CUDA (children do that after the fork)."""
    import numpy  # noqa: F401 - imported once here, before the fork
    import torch
    import triton
    import triton.language  # noqa: F401 - imported once here, before the fork

    from ksearch.eval.candidate import audit

    if config.get("interpret"):
        from ksearch.eval.interpreter import prepare_interpreter
        prepare_interpreter()
        torch.set_num_threads(1)
    for name in config.get("preload") or []:
        importlib.import_module(name)
    audit.preload_for_hook()
    import gc
    gc.collect()
    gc.freeze()        # children's collections then skip the zygote's objects: fewer copy-on-write faults
