"""GPU time that the host cannot skew, and call latency as an eager caller feels it.

The building blocks run in whichever process owns the kernels (a candidate's sandbox, or the trusted
judge for the baselines); *who reads the clock* is the caller's business (see ksearch.eval.judge: for
candidates it is the judge's wall clock around a request, never a number the candidate reports).

- `GraphTimer`: captures one CUDA graph of `n` iterations of [L2 flush, call on input set k % P] and a
  second graph of the same `n` flushes alone. GPU time per call = (replay(call graph) - replay(flush
  graph)) / n. A replay is one launch, so the host's speed does not enter; the flush keeps every call's
  L2 cold, as FlashInfer-Bench times. The rotating input sets mean consecutive calls never see the same
  inputs, so a cache keyed on them gains nothing.
- `cupti_times`: the fallback when the call cannot be captured (it synchronises, reads a tensor on the
  host, ...): per-iteration GPU span (first kernel start to last kernel end) from CUPTI kernel records
  via torch.profiler, the method FlashInfer-Bench uses.
- `eager_loop`: `n` eager calls back to back and one synchronisation: the wall time of this over n is
  the call latency (host launch cost included).

On a CPU there are no graphs; the caller times eager calls (`eager_loop`).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

DEFAULT_FLUSH_BYTES = 256 * 1024 * 1024
_FLUSH: dict[Any, torch.Tensor] = {}


def flush_bytes(device: torch.device) -> int:
    """Twice the L2, so every timed call starts cold (at least 64 MiB)."""
    try:
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
    except Exception:
        l2 = 0
    return max(2 * l2, 64 * 1024 * 1024) if l2 else DEFAULT_FLUSH_BYTES


def flush_buffer(device: torch.device | None = None) -> torch.Tensor:
    device = device or torch.device("cuda", torch.cuda.current_device())
    if device not in _FLUSH:
        _FLUSH[device] = torch.empty(flush_bytes(device), dtype=torch.int8, device=device)
    return _FLUSH[device]


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@dataclass
class Capture:
    """What a capture attempt produced: the two graphs and the last outputs of each input set."""

    n: int
    call_graph: Any = None
    flush_graph: Any = None
    outputs: dict[int, Any] = field(default_factory=dict)     # input set -> the call's last result
    error: str = ""


class GraphTimer:
    """CUDA graphs of n x [flush, call(set k % P)] and n x [flush]; replay either one on request."""

    def __init__(self, call: Callable[[int], Any], n_sets: int, n: int, pool: Any = None):
        self.call, self.n_sets, self.n = call, max(1, n_sets), max(1, n)
        self.flush = flush_buffer()
        self.capture = Capture(self.n)
        self._pool = pool

    def build(self) -> Capture:
        cap = self.capture
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):           # libraries allocate workspaces on a first call off-capture
                for k in range(self.n_sets):
                    self.call(k)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.no_grad(), torch.cuda.graph(g, pool=self._pool):
                for i in range(self.n):
                    self.flush.zero_()
                    cap.outputs[i % self.n_sets] = self.call(i % self.n_sets)
            f = torch.cuda.CUDAGraph()
            with torch.cuda.graph(f, pool=g.pool()):
                for _ in range(self.n):
                    self.flush.zero_()
            torch.cuda.synchronize()
            cap.call_graph, cap.flush_graph = g, f
        except Exception as e:                     # noqa: BLE001 - candidate code may raise anything here
            cap.error = f"{type(e).__name__}: {e}"[:800]
            cap.call_graph = cap.flush_graph = None
            try:
                torch.cuda.synchronize()
            except Exception:
                pass
        return cap

    def replay(self, which: str) -> float:
        """Replay one graph and wait for it; returns this process's own event time in ms (a cross-check)."""
        g = self.capture.call_graph if which == "call" else self.capture.flush_graph
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))


def graph_gpu_ms(call: Callable[[int], Any], n_sets: int, n: int, trials: int) -> tuple[list[float], str]:
    """In-process GPU time per call (trusted code only: the baselines): per trial, the wall time of the call
    graph's replay minus the flush graph's, over n. Returns (per-trial ms, error if not capturable)."""
    t = GraphTimer(call, n_sets, n)
    cap = t.build()
    if cap.call_graph is None:
        return [], cap.error
    t.replay("call")
    t.replay("flush")
    out = []
    for i in range(trials):
        order = ("call", "flush") if i % 2 == 0 else ("flush", "call")
        walls = {}
        for which in order:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            t.replay(which)
            walls[which] = (time.perf_counter() - t0) * 1e3
        out.append(max(walls["call"] - walls["flush"], 0.0) / t.n)
    del t
    return out, ""


def eager_loop(call: Callable[[int], Any], n_sets: int, n: int, device: str) -> dict[int, Any]:
    """n eager calls rotating over the input sets, then one synchronisation; the last result of each set."""
    last: dict[int, Any] = {}
    with torch.no_grad():
        for i in range(n):
            last[i % n_sets] = call(i % n_sets)
    sync(device)
    return last


def eager_ms(call: Callable[[int], Any], n_sets: int, n: int, device: str, trials: int) -> list[float]:
    """In-process call latency per trial (trusted code only): wall time of `eager_loop` over n."""
    out = []
    for _ in range(trials):
        sync(device)
        t0 = time.perf_counter()
        eager_loop(call, n_sets, n, device)
        out.append((time.perf_counter() - t0) * 1e3 / n)
    return out


def cupti_times(call: Callable[[int], Any], n_sets: int, n: int) -> list[float]:
    """Per-iteration GPU span in ms from CUPTI kernel records (torch.profiler), L2 flushed before each call.

    Each iteration runs inside a named range; a kernel belongs to the iteration whose range contains the
    host call that launched it (matched by CUPTI's correlation id), so flushes and other iterations' kernels
    never mix. Empty when the profiler or CUPTI is unavailable.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    flush = flush_buffer()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(n):
            flush.zero_()
            with record_function(f"ksearch_iter_{i}"):
                result = call(i % n_sets)
            del result
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json", prefix="ksearch_cupti_")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    finally:
        os.unlink(path)
    ranges = sorted((e["ts"], e["ts"] + e.get("dur", 0), int(e["name"].rsplit("_", 1)[1])) for e in events
                    if str(e.get("name", "")).startswith("ksearch_iter_") and "ts" in e)
    launch_iter: dict[Any, int] = {}
    for e in events:
        cat = str(e.get("cat", "")).lower()
        if cat in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            for a, b, i in ranges:
                if a <= e.get("ts", -1) <= b:
                    launch_iter[e["args"]["correlation"]] = i
                    break
    spans: dict[int, list[float]] = {}
    for e in events:
        if str(e.get("cat", "")).lower() != "kernel":
            continue
        i = launch_iter.get(e.get("args", {}).get("correlation"))
        if i is None:
            continue
        s, d = float(e["ts"]), float(e.get("dur", 0.0))
        lo, hi = spans.get(i, [s, s + d])
        spans[i] = [min(lo, s), max(hi, s + d)]
    return [(hi - lo) / 1e3 for _, (lo, hi) in sorted(spans.items())]


def iterations_for(target_ms: float, per_call_ms: float, lo: int = 3, hi: int = 500,
                   out_bytes: int = 0, memory_cap: int = 4 << 30) -> int:
    """How many calls one graph holds: enough for `target_ms` of GPU time, bounded by outputs' memory."""
    n = int(target_ms / max(per_call_ms, 1e-4))
    if out_bytes > 0:
        n = min(n, max(lo, memory_cap // out_bytes))
    return max(lo, min(hi, n))


def median(values: Sequence[float]) -> float:
    import statistics

    return float(statistics.median(values))
