"""The candidate's side of a judgement: the only process in which candidate code ever runs.

Forked per candidate from the fork server (ksearch.eval.forkserver), it answers the judge's requests:
build inputs from a seed, call the kernel, hand the outputs back, and run the timing graphs while the judge
holds the clock. Nothing here decides anything: there is no reference, no tolerance, no verdict and no
clock that counts in this process. What it sends back is JSON plus raw tensor bytes (ksearch.eval.wire);
the judge parses it defensively.

The diagnostics it adds (an input changed during the call, outputs still changing after the call returned,
outputs remembered or written by a later call, an output buffer reused across calls) can only ever fail
the candidate: a kernel that disables them gains nothing, because the judge checks every output it receives
against its own reference on its own inputs.

Requests (pickled dicts from the judge; each gets exactly one reply):
  prepare {workload, seed}        build one input set (untimed) -> {}
  call {}                         call the kernel on it -> outputs + diagnostics (the judge clocks this)
  pool {workload, seeds, warmup}  build P timing input sets, warm up on each -> {est_ms}
  capture {n}                     CUDA graphs of n x [flush, call] and n x [flush] -> {ok, error}
  replay {which}                  replay one graph and synchronise (the judge clocks this) -> {event_ms}
  eager {n}                       n eager calls over the pool, one synchronisation (clocked) -> {}
  cupti {n}                       the fallback timer -> {spans_ms}
  pool_outputs {source}           the last outputs of every pool set (from the graph or the eager loop)
  stop {}
"""

from __future__ import annotations

import math
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from ksearch.eval import wire

REFUSED_PREFIX = "ksearch-audit: refused"


class _Kernel:
    """The candidate's entry point and the state of the current workload."""

    def __init__(self, payload: dict[str, Any]):
        self.payload = payload
        self.device: str = payload["device"]
        self.on_gpu = self.device.startswith("cuda")
        self.fn: Any = None
        self.task: Any = None
        self.names: list[str] = []
        self.inputs: list[Any] = []
        self.pristine: list[Any] = []
        self.prev: tuple[list[Any], list[Any]] | None = None     # last call's outputs and their snapshot
        self.pool: list[list[Any]] = []
        self.timer: Any = None
        self.eager_last: dict[int, Any] = {}


def _plain(outs: list[Any]) -> None:
    for o in outs:
        if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor:    # noqa: E721
            raise TypeError(f"an output is a {type(o).__name__}, a torch.Tensor subclass; return plain tensors")
        if isinstance(o, torch.Tensor) and o.is_meta:
            raise TypeError("an output is a meta tensor, which holds no values; return computed tensors")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        # bit-exact, NaN included; contiguous first: an expanded output (stride 0) cannot be viewed as bytes
        return a.numel() == 0 or bool(torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                                                  b.contiguous().reshape(-1).view(torch.uint8)))
    return a is b


def _storage(t: Any) -> int | None:
    if not isinstance(t, torch.Tensor) or t.numel() == 0:
        return None
    return t.untyped_storage().data_ptr()


def _runtime_error(e: BaseException) -> dict[str, Any]:
    """The reply for an exception the candidate's code raised (out of memory named as such)."""
    oom = isinstance(e, (torch.OutOfMemoryError, MemoryError))
    return {"ok": False, "status": "RUNTIME_ERROR",
            "message": f"{type(e).__name__}{' (out of memory)' if oom else ''}: {e}"[:1500],
            "log": traceback.format_exc()[-6000:]}


def _outputs(k: _Kernel, raw: Any) -> list[Any]:
    from ksearch.eval.rules import normalize_outputs

    outs = normalize_outputs(raw, k.names)
    _plain(outs)
    return outs


def _without_reference(definition: Any) -> Any:
    import dataclasses

    if dataclasses.is_dataclass(definition):
        return dataclasses.replace(definition, reference="")
    return definition.model_copy(update={"reference": ""})


def _setup(conn: Any, payload: dict[str, Any]) -> _Kernel:
    """Select the device, load the task's input generator, close the sandbox, then load the candidate."""
    from ksearch.task import load_task

    k = _Kernel(payload)
    if k.on_gpu:
        torch.cuda.set_device(torch.device(k.device if ":" in k.device else "cuda:0"))
        torch.cuda.init()
        torch.empty(1, device=k.device)
        from ksearch.eval.gputime import flush_buffer
        flush_buffer()
    task = load_task(payload["task"], Path(payload["tasks_root"]) if payload.get("tasks_root") else None)
    task.definition = _without_reference(task.definition)   # the reference has no business in this process
    k.task = task
    k.names = task.definition.output_names
    task.workloads_module                   # noqa: B018 - imported now, while files may still be read
    from ksearch.instantiate import loader  # noqa: F401
    import faulthandler
    faulthandler.enable(all_threads=True)   # a segfault prints the Python stack to the captured stderr
    if payload.get("sandbox", True):
        from ksearch.eval import audit
        _close_task_files(task.dir)
        audit.install(payload["scratch"])
    return k


def _close_task_files(task_dir: Path) -> None:
    """From here on nothing in this process opens the task's folder (its reference, its baselines)."""
    root = os.path.realpath(task_dir)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.fsdecode(args[0])
            real = os.path.realpath(path)
            if real == root or real.startswith(root + os.sep):
                message = f"{REFUSED_PREFIX} reading the task's files: {path}"
                try:
                    os.write(2, (message + "\n").encode())
                except OSError:
                    pass
                raise PermissionError(message)

    sys.addaudithook(hook)


def _load(k: _Kernel) -> dict[str, Any]:
    from ksearch.instantiate.loader import load_entry_point

    try:
        k.fn = load_entry_point(k.payload["source"], k.payload.get("entry", "run"),
                                name_hint=str(k.payload.get("name_hint", "cand")))
        return {"ok": True}
    except BaseException as e:      # noqa: BLE001 - a module body may raise anything, SystemExit too
        syntax = isinstance(e.__cause__ or e, SyntaxError)
        return {"ok": False, "status": "COMPILE_ERROR", "message": f"{type(e).__name__}: {e}"[:1500],
                "log": traceback.format_exc()[-6000:], "ran_code": not syntax}


def _scrub(k: _Kernel, workload: Any) -> None:
    """Fill freed allocator memory with NaN so output elements the kernel never writes read as NaN."""
    from ksearch.eval.memory import scrub

    axes = {**k.task.definition.const_axes(), **workload.axes}
    sizes = []
    for spec in k.task.definition.outputs:
        try:
            n = math.prod(spec.concrete_shape(axes)) if not spec.is_scalar else 1
            sizes.append(n * torch.empty((), dtype=spec.torch_dtype).element_size())
        except (KeyError, ValueError):
            pass
    scrub(k.device, sizes)


def _prepare(k: _Kernel, req: dict[str, Any]) -> None:
    w = req["workload"]
    src = k.task.make_inputs(w, device=k.device, seed=int(req["seed"]))
    k.inputs = [src[n] for n in k.task.definition.input_names]
    k.pristine = [v.clone() if isinstance(v, torch.Tensor) else v for v in k.inputs]
    k.workload = w
    _scrub(k, w)
    if k.on_gpu:
        torch.cuda.synchronize()


def _call(k: _Kernel, conn: Any) -> None:
    sync = torch.cuda.synchronize if k.on_gpu else (lambda: None)
    try:
        with torch.no_grad():
            raw = k.fn(*k.inputs)
        sync()
    except BaseException as e:      # noqa: BLE001
        if isinstance(e, KeyboardInterrupt):
            raise
        wire.send(conn, _runtime_error(e))
        return
    try:
        outs = _outputs(k, raw)
    except (ValueError, TypeError) as e:    # the wrong number or kind of outputs: a verdict, not a crash
        wire.send(conn, {"ok": False, "status": "INCORRECT_SHAPE", "message": str(e)[:1500]})
        return
    try:
        del raw
        snap = [o.clone() if isinstance(o, torch.Tensor) else o for o in outs]
    except BaseException as e:      # noqa: BLE001
        if isinstance(e, KeyboardInterrupt):
            raise
        wire.send(conn, _runtime_error(e))
        return
    diag: dict[str, str] = {}
    names = k.task.definition.input_names
    for n, now, before in zip(names, k.inputs, k.pristine):
        if isinstance(before, torch.Tensor) and not _same(now, before):
            diag = {"status": "INCORRECT_INPUT_MODIFIED",
                    "message": f"input {n} changed during the call (inputs are read-only; the call must leave "
                               f"them as it found them)"}
            break
    if not diag and k.prev is not None:
        prev_outs, prev_snap = k.prev
        reused = {_storage(o) for o in outs} - {None} & {_storage(o) for o in prev_outs}
        if reused:
            diag = {"status": "INCORRECT_LATE_WRITE", "message": "returned the output storage of the previous "
                    "call: an earlier result is overwritten by a later call (allocate outputs per call)"}
        elif not all(_same(o, s) for o, s in zip(prev_outs, prev_snap)):
            diag = {"status": "INCORRECT_LATE_WRITE", "message": "the outputs of the previous call changed "
                    "during this call: work deferred to a later call is not timed with the call that needs it"}
    if not diag:
        time.sleep(0.002 if not k.on_gpu else 0.0)
        sync()
        if not all(_same(o, s) for o, s in zip(outs, snap)):
            diag = {"status": "INCORRECT_LATE_WRITE", "message": "outputs changed after the call returned: work "
                    "ran on a stream the timer does not see, or in a background thread"}
    k.prev = (outs, snap)
    wire.send(conn, {"ok": True, **diag}, snap)


def _pool(k: _Kernel, req: dict[str, Any]) -> dict[str, Any]:
    w = req["workload"]
    names = k.task.definition.input_names
    k.pool = []
    for seed in req["seeds"]:
        src = k.task.make_inputs(w, device=k.device, seed=int(seed))
        k.pool.append([src[n] for n in names])
    k.timer, k.eager_last, k.prev = None, {}, None
    n_sets = len(k.pool)
    est = []
    with torch.no_grad():
        for i in range(max(1, int(req.get("warmup", 1)))):
            if k.on_gpu:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                k.fn(*k.pool[i % n_sets])
                b.record()
                b.synchronize()
                est.append(float(a.elapsed_time(b)))
            else:
                t0 = time.perf_counter()
                k.fn(*k.pool[i % n_sets])
                est.append((time.perf_counter() - t0) * 1e3)
    est.sort()
    return {"est_ms": est[len(est) // 2]}


def _pool_call(k: _Kernel):
    fn, pool = k.fn, k.pool
    return lambda i: fn(*pool[i])


def _capture(k: _Kernel, req: dict[str, Any]) -> dict[str, Any]:
    from ksearch.eval.gputime import GraphTimer

    k.timer = GraphTimer(_pool_call(k), len(k.pool), int(req["n"]))
    cap = k.timer.build()
    if cap.call_graph is None:
        k.timer = None
        return {"ok": False, "error": cap.error}
    return {"ok": True}


def _pool_outputs(k: _Kernel, conn: Any, source: str) -> None:
    got = k.timer.capture.outputs if source == "graph" and k.timer is not None else k.eager_last
    tensors: list[Any] = []
    try:
        for j in range(len(k.pool)):
            tensors.extend(_outputs(k, got[j]))
    except BaseException as e:      # noqa: BLE001
        wire.send(conn, {"ok": False, "status": "RUNTIME_ERROR", "message": f"{type(e).__name__}: {e}"[:1500]})
        return
    wire.send(conn, {"ok": True, "sets": len(k.pool)}, tensors)


def _serve(k: _Kernel, conn: Any) -> None:
    from ksearch.eval import gputime

    while True:
        try:
            req = conn.recv()
        except (EOFError, OSError):
            return
        op = req.get("op")
        try:
            if op == "stop":
                wire.send(conn, {"ok": True})
                return
            if op == "prepare":
                _prepare(k, req)
                wire.send(conn, {"ok": True})
            elif op == "call":
                _call(k, conn)
            elif op == "pool":
                wire.send(conn, {"ok": True, **_pool(k, req)})
            elif op == "capture":
                wire.send(conn, _capture(k, req))
            elif op == "replay":
                wire.send(conn, {"ok": True, "event_ms": k.timer.replay(req["which"])})
            elif op == "eager":
                k.eager_last = gputime.eager_loop(_pool_call(k), len(k.pool), int(req["n"]), k.device)
                wire.send(conn, {"ok": True})
            elif op == "cupti":
                spans = gputime.cupti_times(_pool_call(k), len(k.pool), int(req["n"]))
                wire.send(conn, {"ok": True, "spans_ms": spans})
            elif op == "pool_outputs":
                _pool_outputs(k, conn, req.get("source", "graph"))
            else:
                wire.send(conn, {"ok": False, "status": "RUNTIME_ERROR", "message": f"unknown request {op!r}"})
        except BaseException as e:  # noqa: BLE001 - candidate code may raise anything
            if isinstance(e, KeyboardInterrupt):
                raise
            wire.send(conn, _runtime_error(e))


def main(conn: Any, payload: dict[str, Any]) -> None:
    """Entry point in the forked child: set up, load, then serve the judge's requests until `stop`."""
    try:
        k = _setup(conn, payload)
    except BaseException as e:      # noqa: BLE001
        wire.send(conn, {"ok": False, "status": "RUNTIME_ERROR",
                         "message": f"the candidate's sandbox did not start: {type(e).__name__}: {e}"[:1500],
                         "log": traceback.format_exc()[-6000:], "ran_code": False})
        return
    reply = _load(k)
    wire.send(conn, reply)
    if not reply.get("ok"):
        return
    _serve(k, conn)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
