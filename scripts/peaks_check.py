"""The peaks ksearch measures (ksearch.eval.clocks.roofline.measure_peaks) beside independent measurements.

Independent means other code and another clock on separately allocated buffers: triton.testing.do_bench
for the copy (its own L2 flush and events), one pair of events around 30 back-to-back matmuls for the rates. Prints one table; exits 1 when the copy bandwidth differs by more
than 5% or a matmul rate by more than 10%, naming the row. Also prints the copy timed as the evaluator's
CUDA-graph clock does, which is how the wrong 2.72 TB/s of issue 20 arose.

    PYTHONPATH=. python3 scripts/peaks_check.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import triton.testing

from ksearch.eval.clocks.gputime import graph_gpu_ms
from ksearch.eval.clocks.roofline import measure_peaks

COPY_TOLERANCE = 0.05
MATMUL_TOLERANCE = 0.10


def independent(n: int = 8192, copy_bytes: int = 2 << 30) -> dict[str, float]:
    src = torch.randn(copy_bytes // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src),  # noqa: F821 - run before the del
                                 warmup=25, rep=200, return_mode="median")
    graph_ms, _ = graph_gpu_ms(lambda _i: dst.copy_(src), 1, 20, 3)  # noqa: F821 - run before the del
    out = {"copy": 2 * copy_bytes / (ms * 1e-3) / 1e12,
           "copy_as_graph_clock": 2 * copy_bytes / (min(graph_ms) * 1e-3) / 1e12 if graph_ms else float("nan")}
    del src, dst
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    flops = 2 * n ** 3
    out["bf16"] = flops / (back_to_back_ms(lambda: a @ b.t()) * 1e-3) / 1e12
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda")
    out["fp8"] = flops / (back_to_back_ms(
        lambda: torch._scaled_mm(a8, b8.t(), one, one, out_dtype=torch.bfloat16)) * 1e-3) / 1e12
    return out


def back_to_back_ms(fn, calls: int = 30) -> float:
    """Mean ms per call of `calls` back-to-back launches between one pair of events. Not do_bench: with its
    256 MB L2 flush before every call it gave 686 bf16 TFLOP/s where back-to-back calls give ~760 (H200,
    2026-12-04), and a peak is what a kernel reaches when it runs, not after a flush."""
    for _ in range(5):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    ours = measure_peaks("cuda")
    assert ours is not None
    ind = independent()
    rows = [("copy TB/s", ours.copy_tbs, ind["copy"], COPY_TOLERANCE),
            ("bf16 TFLOP/s", ours.tflops["bf16"], ind["bf16"], MATMUL_TOLERANCE),
            ("fp8 TFLOP/s", ours.tflops.get("fp8", float("nan")), ind["fp8"], MATMUL_TOLERANCE)]
    bad = []
    print(f"{'peak':<14}{'ksearch':>10}{'independent':>13}{'diff':>8}")
    for name, a, b, tol in rows:
        diff = abs(a / b - 1)
        print(f"{name:<14}{a:>10.2f}{b:>13.2f}{100 * diff:>7.1f}%{'' if diff <= tol else '  <- beyond ' + str(int(tol * 100)) + '%'}")
        if not diff <= tol:
            bad.append(name)
    print(f"(the evaluator's CUDA-graph clock on the same copy: {ind['copy_as_graph_clock']:.2f} TB/s)")
    print(f"fp32 {ours.tflops.get('fp32', float('nan')):.1f} TFLOP/s ({ours.source('fp32')}); device {ours.device}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ksearch": ours.to_json(), "independent": ind}, f, indent=1)
    if bad:
        print("peaks_check: FAILED: " + ", ".join(bad) + " disagree with the independent measurement")
        return 1
    print("peaks_check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
