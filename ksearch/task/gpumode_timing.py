"""GPUMode's leaderboard timing, for tasks ranked the way GPUMode ranks them (TriMul).

Per case: one checked call, then repeated calls, each on freshly generated inputs (seed + 13 per repeat,
as GPUMode's ranked mode does) and each checked, timed with CUDA events recorded around the call after a
device synchronisation and an L2 flush. Repeats stop once the standard error of the mean falls below
0.1% of the mean (after at least 3 runs), or the summed kernel time passes `max_time_s`, or the wall
time passes `max_wall_s`, or `max_repeats` runs are done. The case's latency is the MEAN; the score is
the geometric mean of the per-case means in milliseconds.

Not the project's evaluator (ksearch/eval), which takes medians against a baseline: this reproduces the
number GPUMode's leaderboard reports, so results can be put beside it. On a CPU the same loop runs with
`time.perf_counter` (for tests).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any


class CheckFailed(RuntimeError):
    """The solution's output disagreed with the reference during timing."""


@dataclass
class CaseTiming:
    name: str
    mean_ms: float
    std_ms: float
    stderr_ms: float
    runs: int

    @property
    def rel_stderr(self) -> float:
        return self.stderr_ms / self.mean_ms if self.mean_ms > 0 else float("inf")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "rel_stderr": self.rel_stderr}


def mean_and_errors(durations_ms: list[float]) -> tuple[float, float, float]:
    """(mean, sample standard deviation, standard error of the mean)."""
    n = len(durations_ms)
    if n == 0:
        raise ValueError("no durations")
    mean = statistics.fmean(durations_ms)
    std = statistics.stdev(durations_ms) if n > 1 else 0.0
    return mean, std, std / math.sqrt(n)


def geometric_mean(values: list[float]) -> float:
    if not values or any(v <= 0 for v in values):
        raise ValueError(f"geometric mean needs positive values, got {values}")
    return math.exp(statistics.fmean(math.log(v) for v in values))


class _Timer:
    """CUDA events around a call on the GPU (after a sync and an L2 flush); perf_counter on the CPU."""

    def __init__(self, device: str, flush_l2: bool):
        import torch

        self.cuda = device.startswith("cuda")
        self.torch = torch
        self.flush = None
        if self.cuda and flush_l2:
            # Twice the H200's 60 MB L2, so no input or weight is still cached when a call starts.
            self.flush = torch.empty(128 * 2**20, dtype=torch.uint8, device=device)

    def time_ms(self, call: Callable[[], Any]) -> tuple[Any, float]:
        if not self.cuda:
            t0 = time.perf_counter()
            out = call()
            return out, (time.perf_counter() - t0) * 1e3
        torch = self.torch
        torch.cuda.synchronize()
        if self.flush is not None:
            self.flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = call()
        end.record()
        torch.cuda.synchronize()
        return out, start.elapsed_time(end)


def time_case(name: str, prepare: Callable[[dict[str, Any]], Callable[[], Any]],
              make_inputs: Callable[[int], dict[str, Any]], check: Callable[[dict[str, Any], Any], str | None], *, seed: int, device: str,
              recheck: bool = True, max_repeats: int = 100, max_time_s: float = 10.0, max_wall_s: float = 120.0,
              rel_stderr: float = 1e-3, flush_l2: bool = True) -> CaseTiming:
    """Time one case GPUMode's way; `check(inputs, output)` returns None or why it failed.

    `prepare(inputs)` returns the zero-argument call that is timed (a solution: `lambda: run(**inputs)`;
    a baseline factory plans or compiles there, outside the timed region). `make_inputs(seed)` builds a
    fresh input dict; with `recheck` every timed call gets new inputs (seed
    + 13 per repeat) and its output is checked, else the first inputs are reused and only checked once.
    """
    timer = _Timer(device, flush_l2)
    inputs = make_inputs(seed)
    call = prepare(inputs)
    why = check(inputs, call())
    if why:
        raise CheckFailed(f"{name}: {why}")
    durations: list[float] = []
    started = time.perf_counter()
    for i in range(max_repeats):
        if recheck:
            seed += 13
            inputs = make_inputs(seed)
            call = prepare(inputs)
        out, ms = timer.time_ms(call)
        if recheck:
            why = check(inputs, out)
            if why:
                raise CheckFailed(f"{name} (repeat {i}): {why}")
        del out
        durations.append(ms)
        if i > 1:
            mean, _, err = mean_and_errors(durations)
            if (err / mean < rel_stderr or mean * len(durations) > max_time_s * 1e3
                    or time.perf_counter() - started > max_wall_s):
                break
    mean, std, err = mean_and_errors(durations)
    return CaseTiming(name, mean, std, err, len(durations))
