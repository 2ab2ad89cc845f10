"""Where a token_chunks decode call's GPU time goes, kernel by kernel (issue 23), on the GPU.

    PYTHONPATH=. python3 benchmarks/decode_profile.py mla full_b64_t27332,b16_l1500 '{}' '{"PDL": false}'

For each knob setting (JSON; '{}' is the catalog's defaults) and shape (decode_sweep's timing shapes or the
task's `full_*` workload names) it runs the rendered family 30 times after a warm-up under torch.profiler
and prints one line per CUDA kernel: launches per call and mean microseconds per launch, then the sum of the
kernels' device time per call beside the wall time of one call (n calls back to back, one synchronisation).
The gap between the two is launch and scheduling overhead; the split between the chunk and the merge kernel
says which one a change should target. Why: decode_sweep gives one number per (variant, shape), which did
not tell whether MLA's 64-sequence rows (0.62-0.78x FlashInfer on an H100, session 26) lose in the chunk
kernel's row loop or around it.

The word `flashinfer` in place of a knob setting profiles the task's FlashInfer baselines the same way (planned
before the profiled calls): how many kernels FlashInfer launches for the same work, and how long each takes.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections import defaultdict
from typing import Any

CALLS = 30
BASELINE = "flashinfer"     # the setting that profiles the task's FlashInfer baselines instead of the family


def _fail(message: str) -> int:
    print(f"decode_profile: {message}", file=sys.stderr)
    return 2


def profile(task_name: str, shape_names: list[str], settings: list[dict[str, Any] | str]) -> list[str]:
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from benchmarks.decode_sweep import (
        FAMILY,
        Variant,
        args_of,
        baseline_calls,
        load_variant,
        make_workload,
        timing_shapes,
    )
    from ksearch.task import load_task

    task = load_task(task_name)
    shapes = dict(timing_shapes(task, dry=False, only=shape_names))
    lines = []
    for knobs in settings:
        run = None if isinstance(knobs, str) else load_variant(
            Variant(task.name, f"{FAMILY}{json.dumps(knobs, sort_keys=True)}", FAMILY, knobs))
        for name in shape_names:
            inputs = task.make_inputs(make_workload(task, name, shapes[name], dry=False), device="cuda", seed=0)
            args = args_of(task, inputs)
            calls = (baseline_calls(task, inputs, dry=False) if run is None
                     else {json.dumps(knobs, sort_keys=True): functools.partial(run, *args)})
            for label, call in calls.items():
                lines += _profile_call(label, name, call, torch, torch_profile, ProfilerActivity)
            del inputs, args, calls
            torch.cuda.empty_cache()
    return lines


def _profile_call(label: str, shape: str, call, torch, torch_profile, activity) -> list[str]:
    """Wall time per call, then each CUDA kernel's launches and mean device time per call."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        call()
    torch.cuda.synchronize()
    wall_us = (time.perf_counter() - t0) / CALLS * 1e6
    with torch_profile(activities=[activity.CUDA]) as prof:
        for _ in range(CALLS):
            call()
        torch.cuda.synchronize()
    kernels: dict[str, list[float]] = defaultdict(list)
    for e in prof.events():
        if e.device_type.name == "CUDA":
            kernels[e.name[:60]].append(e.device_time)
    total = sum(sum(v) for v in kernels.values()) / CALLS
    lines = [f"{label:60} {shape:22} kernels {total:7.1f} us/call, wall {wall_us:7.1f} us/call"]
    for k, v in sorted(kernels.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"    {k:60} {len(v) / CALLS:4.1f}/call  {sum(v) / len(v):7.1f} us")
    print("\n".join(lines), flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or argv[0] not in ("gqa", "mla"):
        return _fail(f"usage: decode_profile.py gqa|mla SHAPE[,SHAPE...] [KNOBS_JSON|{BASELINE} ...]")
    try:
        settings = [a if a == BASELINE else json.loads(a) for a in argv[2:]] or [{}]
    except json.JSONDecodeError as e:
        return _fail(f"knob settings must be JSON objects such as '{{\"PDL\": false}}' or {BASELINE}: {e}")
    if not all(isinstance(s, dict) or s == BASELINE for s in settings):
        return _fail(f"knob settings must be JSON objects such as '{{\"PDL\": false}}' or {BASELINE}")
    from benchmarks.decode_sweep import GQA, MLA, SHAPE_NAMES, full_shape_names

    task = {"gqa": GQA, "mla": MLA}[argv[0]]
    shapes = [s for s in argv[1].split(",") if s]
    known = set(SHAPE_NAMES) | full_shape_names([task])
    if not shapes or any(s not in known for s in shapes):
        return _fail(f"shapes are a comma list of {', '.join(SHAPE_NAMES)} or the task's `full` workload names "
                     f"(full_...); got {argv[1]!r}")
    import torch

    if not torch.cuda.is_available():
        return _fail("needs a CUDA device")
    profile(task, shapes, settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
