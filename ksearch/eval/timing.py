"""Timing: interleaved trials of several subjects, CUDA events with a cold L2 on a GPU, wall clock on a CPU.

`run_trials(subjects, ...)` times every subject (a candidate, a baseline variant) in `trials` rounds;
within a round each subject runs `iterations` timed calls, and the order of subjects rotates from round
to round, so clock drift and thermal changes hit all of them alike. Each subject first runs `warmup`
untimed calls (JIT compilation, autotuning, caches).

GPU iteration: `before(i)` (outside the bracket: e.g. copy the next input set into the candidate's input
buffers), an L2 flush (writing at least twice the L2; see flush_bytes), start event, the call, end event,
`after(i, result)` (outside the bracket: e.g. keep a snapshot of the outputs, taken on the same stream
right after the end event). Events are read after one synchronisation per round, so launches pipeline
as they would in production. CPU iteration: the same hooks around `time.perf_counter()`.

The functions used to time are bound when this module is imported (before any candidate runs), so a
candidate that replaces `time.perf_counter` or `torch.cuda.Event.elapsed_time` cannot change a number
in flight; ksearch.eval.integrity detects and undoes such replacements too.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

_perf = time.perf_counter
_median = statistics.median
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed = torch.cuda.Event.elapsed_time
_synchronize = torch.cuda.synchronize
_zero = torch.Tensor.zero_

_FLUSH: dict[Any, torch.Tensor] = {}
DEFAULT_FLUSH_BYTES = 256 * 1024 * 1024


def flush_bytes(device: torch.device) -> int:
    """At least twice the L2, so every timed call starts cold; never less than 256 MiB, whose write (~90 µs
    on an H200) keeps the GPU busy while the host enqueues the start event and the call, so the events
    time the kernel rather than Python's launch overhead."""
    try:
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
    except Exception:
        l2 = 0
    return max(2 * l2, DEFAULT_FLUSH_BYTES)


def _l2_flush_buffer(device: torch.device) -> torch.Tensor:
    if device not in _FLUSH:
        _FLUSH[device] = torch.empty(flush_bytes(device), dtype=torch.int8, device=device)
    return _FLUSH[device]


@dataclass
class Subject:
    """Something to time: `call()` is timed; `before`/`after` run outside the timed bracket."""

    name: str
    call: Callable[[], Any]
    before: Callable[[int], None] | None = None
    after: Callable[[int, Any], None] | None = None
    done_trial: Callable[[int], None] | None = None     # after each of its rounds (verify state, ...); -1: warm-up
    begin_trial: Callable[[], None] | None = None       # before each of its rounds and its warm-up


@dataclass
class TrialResults:
    samples: dict[str, list[list[float]]] = field(default_factory=dict)   # subject -> round -> iteration ms
    errors: dict[str, str] = field(default_factory=dict)                  # subject -> why it stopped

    def trial_medians(self, name: str) -> list[float]:
        return [_median(r) for r in self.samples.get(name, []) if r]


def _iterate_cuda(s: Subject, start_index: int, n: int, flush: torch.Tensor | None) -> list[float]:
    starts = [_Event(enable_timing=True) for _ in range(n)]
    ends = [_Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        if s.before is not None:
            s.before(start_index + i)
        if flush is not None:
            _zero(flush)
        _record(starts[i])
        result = s.call()
        _record(ends[i])
        if s.after is not None:
            s.after(start_index + i, result)
        del result
    _synchronize()
    return [_elapsed(a, b) for a, b in zip(starts, ends)]


def _iterate_cpu(s: Subject, start_index: int, n: int) -> list[float]:
    out = []
    for i in range(n):
        if s.before is not None:
            s.before(start_index + i)
        t0 = _perf()
        result = s.call()
        t1 = _perf()
        if s.after is not None:
            s.after(start_index + i, result)
        del result
        out.append((t1 - t0) * 1e3)
    return out


def run_trials(subjects: list[Subject], *, device: str, warmup: int, iterations: int, trials: int,
               cold_l2: bool = True) -> TrialResults:
    """Time every subject in `trials` interleaved rounds. A subject that raises is dropped (its error kept)."""
    import traceback

    on_gpu = device.startswith("cuda")
    flush = _l2_flush_buffer(torch.device("cuda", torch.cuda.current_device())) if on_gpu and cold_l2 else None
    res = TrialResults({s.name: [] for s in subjects})
    counters = {s.name: 0 for s in subjects}

    def guarded(s: Subject, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except BaseException as e:           # noqa: BLE001 - candidate code may raise anything
            if isinstance(e, KeyboardInterrupt):
                raise
            res.errors.setdefault(s.name, f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
            return None

    def step(s: Subject, n: int, t: int) -> list[float] | None:
        if s.begin_trial is not None:
            s.begin_trial()
        start = counters[s.name]
        counters[s.name] += n
        got = guarded(s, lambda: _iterate_cuda(s, start, n, flush) if on_gpu else _iterate_cpu(s, start, n))
        if s.done_trial is not None:
            guarded(s, lambda: s.done_trial(t))
        return got if s.name not in res.errors else None

    if warmup > 0:
        for s in subjects:
            step(s, warmup, -1)
    if on_gpu:
        _synchronize()
    live = [s for s in subjects if s.name not in res.errors]
    for t in range(trials):
        k = t % len(live) if live else 0
        for s in live[k:] + live[:k]:
            if s.name in res.errors:
                continue
            got = step(s, max(1, iterations), t)
            if got is not None:
                res.samples[s.name].append(got)
    return res


def time_cuda(fn: Callable[[], Any], *, warmup: int, iterations: int, cold_l2: bool = True) -> float:
    r = run_trials([Subject("fn", fn)], device="cuda", warmup=warmup, iterations=iterations, trials=1,
                   cold_l2=cold_l2)
    if "fn" in r.errors:
        raise RuntimeError(r.errors["fn"])
    return _median(r.samples["fn"][0])


def kernel_streams(call: Callable[[], Any]) -> dict[str, Any] | None:
    """Which CUDA streams a call ran kernels on, from CUPTI (torch.profiler); None when unavailable.

    A marker kernel on the current stream runs first, so its stream id names "ours". Returns
    {"ours": id, "other_streams": {id: total kernel µs}, "kernels": n}.
    """
    import json
    import os
    import tempfile

    try:
        from torch.profiler import ProfilerActivity, profile
    except Exception:
        return None
    marker = torch.empty(1, device="cuda")
    _synchronize()
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            marker.fill_(1.0)
            result = call()
            _synchronize()
        del result
        fd, path = tempfile.mkstemp(suffix=".json", prefix="ksearch_streams_")
        os.close(fd)
        try:
            prof.export_chrome_trace(path)
            with open(path) as f:
                trace = json.load(f)
        finally:
            os.unlink(path)
    except Exception:
        return None
    kernels = [e for e in trace.get("traceEvents", []) if str(e.get("cat", "")).lower() == "kernel"]
    if not kernels:
        return None
    kernels.sort(key=lambda e: e.get("ts", 0))
    ours = kernels[0].get("args", {}).get("stream")
    other: dict[str, float] = {}
    for e in kernels[1:]:
        st = e.get("args", {}).get("stream")
        if st != ours:
            other[str(st)] = other.get(str(st), 0.0) + float(e.get("dur", 0.0))
    return {"ours": ours, "other_streams": other, "kernels": len(kernels) - 1}
