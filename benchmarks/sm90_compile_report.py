"""Compile a catalog family's Triton kernels for sm_90a without a GPU and report what the chip would get.

    python benchmarks/sm90_compile_report.py TASK FAMILY '{"BLOCK_N": 32}' '{}' ...

One JSON line per (knob setting, kernel): shared memory per block (the H200 allows 232448 bytes),
registers per thread, stack bytes (spills), the number of HGMMA (wgmma) and HMMA (mma.sync) instructions
and of LDGSTS (cp.async) in the SASS, the Triton num_stages used and the MMA layouts chosen. The kernels
are captured by running the rendered `run()` on the task's last tiny workload on the CPU with Triton's
launcher replaced, then compiled for GPUTarget("cuda", 90) by the installed Triton (its bundled ptxas and
cuobjdump). A setting that fails to compile prints {"knobs": ..., "error": ...}; the exit code is 0
unless the arguments are bad (2).

Why: the interpreter cannot see register spills, shared-memory overflows or whether tl.dot became wgmma,
and the H200 is scarce; this runs on any CPU.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

SM90_SHARED_LIMIT = 232448


def _fail(message: str) -> int:
    print(f"sm90_compile_report: {message}", file=sys.stderr)
    return 2


def _capture(task: Any, source: str, name_hint: str, workload: Any = None) -> list[tuple[Any, tuple, dict]]:
    """(jit function, args, kwargs) of every launch `run()` makes on `workload` (default: the task's last
    tiny workload)."""
    from triton.runtime.jit import JITFunction

    from ksearch.instantiate.loader import load_entry_point

    launches: list[tuple[Any, tuple, dict]] = []
    original = JITFunction.run
    JITFunction.run = lambda self, *args, grid, warmup, **kw: launches.append((self, args, kw))
    try:
        inputs = task.make_inputs(workload or task.workload_set("tiny")[-1], device="cpu", seed=0)
        load_entry_point(source, name_hint=name_hint)(**inputs)
    finally:
        JITFunction.run = original
    return launches


def _compile(fn: Any, args: tuple, kw: dict) -> Any:
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import mangle_type
    from triton.tools.tensor_descriptor import TensorDescriptor

    ptr = {torch.bfloat16: "*bf16", torch.float32: "*fp32", torch.int32: "*i32", torch.int64: "*i64",
           torch.float16: "*fp16", torch.uint8: "*u8", torch.float8_e4m3fn: "*fp8e4nv", torch.float8_e5m2: "*fp8e5"}
    unspecialized = {fn.params[i].name if isinstance(i, int) else i for i in (fn.do_not_specialize or [])}
    sig, consts, attrs = {}, {}, {}
    for i, p in enumerate(fn.params):
        if p.is_constexpr:
            sig[p.name], consts[p.name] = "constexpr", kw[p.name]
            continue
        v = args[i]
        if isinstance(v, torch.Tensor):
            sig[p.name], attrs[(i,)] = ptr[v.dtype], [["tt.divisibility", 16]]
        elif isinstance(v, TensorDescriptor):       # a host TMA descriptor: its block type, as the JIT names it
            sig[p.name] = mangle_type(v)
        elif v is None:                             # an unused operand (e.g. no descriptor on the pointer path)
            sig[p.name], consts[p.name] = "constexpr", None
        elif isinstance(v, float):
            sig[p.name] = "fp32"
        else:
            sig[p.name] = "i32"
            if v and v % 16 == 0 and p.name not in unspecialized:
                attrs[(i,)] = [["tt.divisibility", 16]]
    return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                          target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": kw.get("num_warps", 4), "num_stages": kw.get("num_stages", 3)})


def _sass_facts(cubin: bytes) -> dict[str, Any]:
    import triton

    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.is_file():
        return {}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "kernel.cubin"
        path.write_bytes(cubin)
        usage = subprocess.run([str(tool), "-res-usage", str(path)], capture_output=True, text=True).stdout
        sass = subprocess.run([str(tool), "-sass", str(path)], capture_output=True, text=True).stdout
    regs, stack = re.search(r"REG:(\d+)", usage), re.search(r"STACK:(\d+)", usage)
    return {"regs": int(regs.group(1)) if regs else None, "stack": int(stack.group(1)) if stack else None,
            "hgmma": sass.count("HGMMA"), "hmma": sass.count("HMMA"), "ldgsts": sass.count("LDGSTS")}


def report(task_name: str, family: str, settings: list[dict[str, Any]], workload: Any = None,
           kernels: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """One row per (setting, kernel launch) on `workload` (see `_capture`), only the launches of `kernels`
    when given; see the module docstring."""
    os.environ.pop("TRITON_INTERPRET", None)
    import triton

    from ksearch.task import load_task
    from ksearch.task.catalog import load_catalog

    task = load_task(task_name)
    catalog = load_catalog(task.strategies_dir, task.name)
    rows = []
    for knobs in settings:
        try:
            launches = _capture(task, catalog.render(family, knobs), f"sm90_{family}", workload)
        except Exception as e:  # noqa: BLE001 - a setting that cannot render or run its host code is reported
            rows.append({"knobs": knobs, "error": f"{type(e).__name__}: {e}"[-800:]})
            continue
        for fn, args, kw in launches:
            if kernels is not None and fn.__name__ not in kernels:
                continue
            row: dict[str, Any] = {"knobs": knobs, "kernel": fn.__name__, "triton": triton.__version__,
                                   "num_warps": kw.get("num_warps"), "num_stages": kw.get("num_stages")}
            try:
                k = _compile(fn, args, kw)
            except Exception as e:  # noqa: BLE001 - a launch that does not compile is reported, not fatal
                row["error"] = f"{type(e).__name__}: {e}"[-800:]
                rows.append(row)
                continue
            row["shared"] = k.metadata.shared
            row["fits_h200"] = k.metadata.shared <= SM90_SHARED_LIMIT
            row["mma_layouts"] = sorted({m.replace("versionMajor = ", "v").replace("versionMinor = 0, ", "")
                                         for m in re.findall(r"nvidia_mma<\{[^}]*\}>", k.asm["ttgir"])})
            row.update(_sass_facts(k.asm["cubin"]))
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        return _fail("usage: sm90_compile_report.py TASK FAMILY [KNOBS_JSON ...] (no knobs: the defaults)")
    try:
        settings = [json.loads(a) for a in argv[2:]] or [{}]
    except json.JSONDecodeError as e:
        return _fail(f"knob settings must be JSON objects such as '{{\"BLOCK_N\": 32}}': {e}")
    if not all(isinstance(s, dict) for s in settings):
        return _fail("each knob setting must be a JSON object such as '{\"BLOCK_N\": 32}'")
    from ksearch.task.catalog import CatalogError
    from ksearch.task.registry import UnknownTaskError

    try:
        rows = report(argv[0], argv[1], settings)
    except (UnknownTaskError, CatalogError) as e:
        return _fail(str(e))
    for row in rows:
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
