"""The trusted evaluation worker: computes references and verdicts, holds the clock, never runs candidates.

Started by ksearch.eval.parent.worker_handle.WorkerProcess as `python -c "from ksearch.eval.trusted.worker import main; main()"`
with a JSON argument (socket fd, parent pid, interpreter on/off, memory cap). It dies with its parent
(PR_SET_PDEATHSIG), turns core dumps off, enables faulthandler, switches the Triton interpreter on (CPU),
and serves jobs: "judge" (ksearch.eval.trusted.judge: one fresh sandboxed process per candidate, forked from the
fork server this worker owns) and "baseline" (ksearch.eval.trusted.baselines: trusted code, timed here).

After each job it flushes Python's and C's stdio and writes the job's end marker to fd 1, so the parent
knows where the job's output ends. Imports only torch, triton, numpy and flashinfer (through baselines).
"""

from __future__ import annotations

import ctypes
import faulthandler
import json
import os
import signal
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any

from ksearch.eval.trusted.baselines import BaselineJob, measure_baselines  # noqa: F401 (re-exported)
from ksearch.eval.trusted.judge import EvalJob, judge  # noqa: F401 (re-exported)

_SPAWNER: Any = None

MARKER = b"\n@@ksearch-job-end:%s@@\n"


def _die_with_parent(parent: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)          # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - no prctl: the parent check below still applies
        pass
    if os.getppid() != parent:                         # the parent died before prctl took effect
        os._exit(1)


def _flush_and_mark(token: str) -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not stop the marker
            pass
    try:
        ctypes.CDLL(None).fflush(None)
    except Exception:  # noqa: BLE001 - no libc fflush: best effort
        pass
    try:
        os.write(1, MARKER % token.encode())
    except OSError:
        pass


def _setup(config: dict[str, Any]) -> None:
    _die_with_parent(int(config["parent"]))
    from ksearch.eval.trusted.memory import limit_process

    limit_process(None)
    faulthandler.enable(all_threads=True)
    if config.get("interpret"):
        from ksearch.eval.interpreter import prepare_interpreter
        prepare_interpreter()
    import torch

    if config.get("interpret"):
        torch.set_num_threads(1)      # see sandbox.WorkerProcess: thread pools make CPU timings erratic

    split = None
    if not config.get("interpret") and torch.cuda.is_available():
        # the judge's CPUs apart from the candidates' (ksearch.eval.isolation.cpus: thread teams that wait
        # for a core another process spins on stalled GPU windows by 2-49 ms)
        from ksearch.eval.isolation import cpus
        split = cpus.plan(None, *cpus.gpu_slot(str(config.get("device") or "cuda")))
        if split is not None:
            cpus.run_on(split.judge)

    global _SPAWNER
    from ksearch.eval.isolation.spawn import CandidateSpawner
    _SPAWNER = CandidateSpawner(interpret=bool(config.get("interpret")), memory_limit_bytes=config.get("memory_limit"),
                                root=config.get("scratch_root"), cpus=split.candidates if split else None)
    if not config.get("interpret"):
        _SPAWNER.warm_triton_cache()


def serve(conn: Any) -> None:
    """Answer ("judge", EvalJob) and ("baseline", BaselineJob) until ("stop", ...) or EOF."""
    while True:
        try:
            kind, payload, token = conn.recv()
        except (EOFError, OSError):
            return
        if kind == "stop":
            if _SPAWNER is not None:
                _SPAWNER.close()
            return
        try:
            if kind == "judge":
                reply: tuple[str, Any] = ("ok", judge(payload, _SPAWNER))
            elif kind == "baseline":
                reply = ("ok", measure_baselines(payload))
            elif kind == "pin":
                from ksearch.task import snapshot
                for snap in payload:
                    snapshot.pin(snap)
                reply = ("ok", None)
            else:
                reply = ("error", f"unknown job kind {kind!r}")
        except Exception:  # noqa: BLE001 - any failure of a job goes back to the parent as its traceback
            reply = ("error", traceback.format_exc())
        _flush_and_mark(token)
        conn.send((token, *reply))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv if argv is None else argv
    config = json.loads(argv[1])
    conn = Connection(int(config["fd"]))
    try:
        _setup(config)
    except Exception:  # noqa: BLE001 - a setup failure ends the worker with its traceback on stderr
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(3)
    conn.send(("ready", os.getpid()))
    serve(conn)
