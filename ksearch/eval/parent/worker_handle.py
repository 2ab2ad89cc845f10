"""The worker process seen from the parent: spawn it, talk to it, bound its output, kill its whole group.

- Spawned, not forked: a fresh interpreter (`subprocess.Popen`) that imports only torch, triton, numpy
  and ksearch.eval; nothing of the parent's state (or CUDA context) is inherited.
- Its own session (`start_new_session=True`, i.e. setsid before exec): a timeout or a failure kills
  the process *group*, so processes a candidate started go too. The worker also asks the kernel to kill
  it if the parent dies (PR_SET_PDEATHSIG), so no orphan keeps a GPU busy.
- Jobs and results travel as pickles over a socket pair; the worker's fd 1 and 2 (Python prints, C
  printf, CUDA and Triton messages, faulthandler's traceback of a segfault) go to a pipe the parent
  drains in a thread, keeping only the first and last kilobytes of each job, so output of any size
  costs bounded memory and still lands in the report. A marker line with a per-job token, written by
  the worker after flushing, tells the parent where one job's output ends.
- `request()` answers "ok", "error" (the worker's own code raised), "timeout" (killed at the limit),
  "died" (the process ended, e.g. on a segfault, with the signal named) or "forged" (the reply lacked the
  job's random token or did not parse: candidate code wrote to the evaluator's socket).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

HEAD_BYTES = 4 * 1024
TAIL_BYTES = 12 * 1024
MARKER = b"\n@@ksearch-job-end:%s@@\n"

_SIGNAL_MEANING = {
    "SIGSEGV": "segmentation fault", "SIGABRT": "abort: a failed assertion, os.abort() or a fatal library error",
    "SIGKILL": "killed: out of host memory (the kernel's OOM killer) or killed from outside",
    "SIGBUS": "bus error", "SIGFPE": "arithmetic exception", "SIGILL": "illegal instruction",
    "SIGTERM": "terminated", "SIGXCPU": "CPU time limit", "SIGXFSZ": "file size limit",
}


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} ({_SIGNAL_MEANING.get(name, 'signal')})"
    return f"exited, exit code {code}"


class WorkerStartError(RuntimeError):
    """The worker did not come up (bad environment, import error); the message carries its output."""


@dataclass
class Reply:
    kind: str            # ok | error | timeout | died | forged
    value: Any
    output: str = ""     # excerpt of what the worker printed during the job
    output_bytes: int = 0


class OutputCapture:
    """Drains a pipe in a daemon thread; per job keeps the first HEAD and last TAIL bytes and the total."""

    def __init__(self, fd: int, head: int = HEAD_BYTES, tail: int = TAIL_BYTES):
        self.fd, self.head_limit, self.tail_limit = fd, head, tail
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.eof = threading.Event()
        self.marker: bytes | None = None
        self.pending = b""
        self._reset()
        self.thread = threading.Thread(target=self._run, name="ksearch-worker-output", daemon=True)
        self.thread.start()

    def _reset(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def _commit(self, data: bytes) -> None:
        if not data:
            return
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.tail_limit:
                del self.tail[:len(self.tail) - self.tail_limit]

    def _run(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            with self.lock:
                buf = self.pending + chunk
                self.pending = b""
                if self.marker is not None:
                    i = buf.find(self.marker)
                    if i >= 0:
                        self._commit(buf[:i])
                        self.marker = None
                        self.done.set()
                        continue        # anything after the marker is between jobs
                    keep = len(self.marker) - 1
                    if len(buf) > keep:
                        self._commit(buf[:-keep])
                        self.pending = buf[-keep:]
                    else:
                        self.pending = buf
                else:
                    self._commit(buf)
        with self.lock:
            self._commit(self.pending)
            self.pending = b""
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.eof.set()
        self.done.set()

    def begin(self, token: str) -> None:
        with self.lock:
            self._reset()
            self.pending = b""
            self.marker = MARKER % token.encode()
            self.done.clear()

    def wait(self, timeout: float) -> None:
        self.done.wait(timeout)

    def excerpt(self) -> tuple[str, int]:
        with self.lock:
            head, tail, total = bytes(self.head), bytes(self.tail + self.pending), self.total + len(self.pending)
        omitted = total - len(head) - len(tail)
        text = head.decode("utf-8", "replace")
        if omitted > 0:
            text += f"\n[... {omitted} bytes omitted ...]\n"
        return text + tail.decode("utf-8", "replace"), total


# The worker asks to die with its parent (PR_SET_PDEATHSIG), which Linux ties to the *thread* that forked
# it: a worker started from a short-lived thread (a parallel search's cycle) would die with that thread.
# So every worker is started from this one thread, which lives as long as the process.
_LAUNCHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ksearch-worker-launcher")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def _kill_group_and_remove(pid: int, scratch_root: str) -> None:
    _kill_group(pid)
    shutil.rmtree(scratch_root, ignore_errors=True)


_STALE_SWEPT = False


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[3])


class WorkerProcess:
    """One spawned worker. Not thread-safe: one request at a time."""

    def __init__(self, *, interpret: bool, memory_limit_bytes: int | None = None, tasks: list[Any] | None = None,
                 device: str = ""):
        self.tasks = list(tasks or [])       # TaskSnapshots the worker pins before its first job
        parent_sock, child_sock = socket.socketpair()
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join([_package_root()] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        if not interpret:
            env.pop("TRITON_INTERPRET", None)
        else:
            # One thread for torch, OpenMP and BLAS: on a busy CPU, thread pools contending for cores
            # make a millisecond call take a hundred (measured: 0.7 ms vs 150 ms under load); one thread
            # keeps interpreter timings usable for ordering kernels.
            for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
                env.setdefault(var, "1")
        from ksearch.eval.isolation.spawn import new_scratch_root, remove_stale_scratch_roots

        global _STALE_SWEPT
        if not _STALE_SWEPT:
            _STALE_SWEPT = True
            remove_stale_scratch_roots()
        # The candidates' scratch folders live under a root this process owns and removes, even when the
        # worker is killed (it cannot clean up after itself then).
        self.scratch_root = new_scratch_root()
        config = {"fd": child_sock.fileno(), "parent": os.getpid(), "interpret": interpret,
                  "memory_limit": memory_limit_bytes, "scratch_root": str(self.scratch_root),
                  "device": device}         # a GPU worker's share of the host's CPUs (isolation.cpus.gpu_slot)
        try:
            argv = [sys.executable, "-c", "from ksearch.eval.trusted.worker import main; main()", json.dumps(config)]
            self.proc = _LAUNCHER.submit(lambda: subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=write_fd, stderr=write_fd, pass_fds=(child_sock.fileno(),),
                start_new_session=True, env=env, close_fds=True)).result()
        finally:
            os.close(write_fd)
            child_sock.close()
        self.conn = Connection(parent_sock.detach())
        self.capture = OutputCapture(read_fd)
        self.ready = False
        self._finalizer = weakref.finalize(self, _kill_group_and_remove, self.proc.pid, str(self.scratch_root))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout: float) -> None:
        if self.ready:
            return
        self.capture.begin("startup")
        ok = False
        try:
            if self.conn.poll(timeout):
                kind, _ = self.conn.recv()
                ok = kind == "ready"
        except (EOFError, OSError):
            ok = False
        if ok and self.tasks:
            ok = self._pin(timeout)
        if not ok:
            self.kill()
            self.capture.eof.wait(2.0)
            out, _ = self.capture.excerpt()
            raise WorkerStartError(f"the evaluation worker did not start within {timeout:.0f}s "
                                   f"({describe_exit(self.proc.poll())}); its output:\n{out[-4000:]}")
        self.ready = True

    def _pin(self, timeout: float) -> bool:
        """Hand the worker the task snapshots it must judge by (ksearch.task.snapshot), before any job."""
        self.capture.begin("pin")
        try:
            self.conn.send(("pin", self.tasks, "pin"))
            if not self.conn.poll(timeout):
                return False
            reply = self.conn.recv()
        except (EOFError, OSError):
            return False
        if reply != ("pin", "ok", None):
            print(f"the worker did not pin the task: {reply!r}", file=sys.stderr)
            return False
        return True

    def request(self, kind: str, payload: Any, timeout: float, startup_timeout: float = 180.0) -> Reply:
        self.wait_ready(startup_timeout)
        token = secrets.token_hex(8)
        self.capture.begin(token)
        deadline = time.monotonic() + timeout
        watchdog: threading.Timer | None = None
        try:
            self.conn.send((kind, payload, token))
            if not self.conn.poll(timeout):
                self.kill()
                self.capture.eof.wait(1.0)
                return Reply("timeout", None, *self.capture.excerpt())
            # A message that announces more bytes than ever come would block recv() forever: past the
            # deadline the group is killed, which closes the stream and ends recv() with EOF.
            watchdog = threading.Timer(max(5.0, deadline - time.monotonic() + 5.0), _kill_group, (self.proc.pid,))
            watchdog.daemon = True
            watchdog.start()
            reply = self.conn.recv()
        except (EOFError, OSError):
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
            code = self.proc.poll()
            self.kill()
            self.capture.eof.wait(2.0)
            return Reply("died", describe_exit(code), *self.capture.excerpt())
        except Exception as e:          # noqa: BLE001 - a garbled stream: something in the worker wrote to our socket
            self.kill()
            return Reply("forged", f"the worker sent an unreadable reply ({type(e).__name__}: {e}): something "
                                   f"in the worker wrote to the evaluator's socket", *self.capture.excerpt())
        finally:
            if watchdog is not None:
                watchdog.cancel()
        # Only the evaluator's own loop knows the job's token; a reply forged by candidate code would not.
        if not (isinstance(reply, tuple) and len(reply) == 3 and reply[0] == token):
            self.kill()
            return Reply("forged", "the worker's reply did not carry the job's token: something in the worker "
                                   "wrote to the evaluator's socket", *self.capture.excerpt())
        _, status, value = reply
        self.capture.wait(1.0)
        return Reply(status, value, *self.capture.excerpt())

    def stop(self, grace_s: float = 5.0) -> None:
        if self.alive():
            try:
                self.conn.send(("stop", None, ""))
                self.proc.wait(grace_s)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def kill(self) -> None:
        """Kill the worker's whole process group, reap it, remove its candidates' scratch folders."""
        _kill_group(self.proc.pid)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        shutil.rmtree(self.scratch_root, ignore_errors=True)
        try:
            self.conn.close()
        except OSError:
            pass
        self._finalizer.detach()


def wait_for(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    """Poll `predicate()` until true or `timeout` seconds pass (tests use it for process checks)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
