"""How close a latency is to the physical limit of the device, from a task's traffic and FLOP formulas.

A task declares in tasks/<name>/roofline.py the fewest bytes any correct kernel must move
(`traffic_bytes`), its useful FLOPs (`flops`) and which tensor-core peak applies (`compute_dtype`).
A workload's limit is the slower of the two: moving its bytes at the copy bandwidth, or doing its FLOPs
at the tensor-core peak. `limit_fraction` says which one binds and how close a measured latency is to
it; `physical_floor_ms` is the latency below which no honest kernel can be (the judge rejects faster).

Peaks come from the same process (`measure_peaks`: a large device-to-device copy, a large bf16 matmul,
a large FP8 `torch._scaled_mm`) or from the vendor's datasheet, and say which (`Peaks.memory_source`,
`Peaks.compute_sources`). No hydra, litellm or rich here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

COMPUTE_DTYPES = ("bf16", "fp8", "fp32")


@dataclass(frozen=True)
class Peaks:
    """Ceilings of one device: copy bandwidth (bytes read + written per second) and dense tensor peaks."""

    device: str
    copy_tbs: float                                   # TB/s
    tflops: dict[str, float]                          # dense peak per compute dtype, TFLOP/s
    memory_source: str = "datasheet"                  # "measured" | "datasheet"
    compute_sources: dict[str, str] = field(default_factory=dict)   # per dtype: "measured" | "datasheet"

    def peak_tflops(self, dtype: str) -> float:
        if dtype not in self.tflops:
            raise ValueError(f"no {dtype!r} peak for {self.device}; known: {sorted(self.tflops)}")
        return self.tflops[dtype]

    def source(self, dtype: str | None = None) -> str:
        return self.memory_source if dtype is None else self.compute_sources.get(dtype, "datasheet")

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "copy_tbs": self.copy_tbs, "tflops": dict(self.tflops),
                "memory_source": self.memory_source, "compute_sources": dict(self.compute_sources)}


# Vendor datasheet values (dense, no sparsity). fp32 is the plain (non-tensor-core) rate.
DATASHEETS: dict[str, Peaks] = {
    "H200": Peaks("NVIDIA H200 (datasheet)", 4.8, {"bf16": 989.0, "fp8": 1979.0, "fp32": 67.0},
                  "datasheet", {"bf16": "datasheet", "fp8": "datasheet", "fp32": "datasheet"}),
    "H100": Peaks("NVIDIA H100 SXM (datasheet)", 3.35, {"bf16": 989.0, "fp8": 1979.0, "fp32": 67.0},
                  "datasheet", {"bf16": "datasheet", "fp8": "datasheet", "fp32": "datasheet"}),
}
H200_DATASHEET = DATASHEETS["H200"]


def datasheet_for(device_name: str) -> Peaks | None:
    """The datasheet entry whose key occurs in a device name such as "NVIDIA H200", else None."""
    for key in sorted(DATASHEETS, key=len, reverse=True):
        if key in device_name.upper():
            return DATASHEETS[key]
    return None


@dataclass(frozen=True)
class LimitFraction:
    """How close one latency is to the binding physical limit of its workload."""

    fraction: float                                   # achieved / limit (1.0 = at the limit)
    bound: Literal["memory", "compute"]
    achieved: float                                   # TB/s (memory) or TFLOP/s (compute)
    limit: float                                      # same unit
    unit: str                                         # "TB/s" | "TFLOP/s"
    source: str                                       # e.g. "copy bandwidth (measured)", "fp8 peak (datasheet)"

    def to_json(self) -> dict[str, Any]:
        return {"fraction": self.fraction, "bound": self.bound, "achieved": self.achieved, "limit": self.limit,
                "unit": self.unit, "source": self.source}


def _work(task: Any, workload: Any) -> tuple[int | None, int | None, str | None]:
    return task.traffic_bytes(workload), task.flops(workload), task.compute_dtype


def limit_times_s(traffic: int | None, flops: int | None, dtype: str | None, peaks: Peaks) -> tuple[float, float]:
    """(seconds to move the traffic at the copy bandwidth, seconds for the FLOPs at the dtype's peak)."""
    t_mem = traffic / (peaks.copy_tbs * 1e12) if traffic else 0.0
    t_comp = flops / (peaks.peak_tflops(dtype) * 1e12) if flops and dtype else 0.0
    return t_mem, t_comp


def limit_fraction(task: Any, workload: Any, latency_ms: float, peaks: Peaks) -> LimitFraction | None:
    """Fraction of the binding limit (the larger of traffic / bandwidth and FLOPs / peak) reached at
    `latency_ms`; None when the task declares neither formula or the latency is not positive."""
    traffic, flops, dtype = _work(task, workload)
    t_mem, t_comp = limit_times_s(traffic, flops, dtype, peaks)
    if latency_ms is None or latency_ms <= 0 or (t_mem == 0 and t_comp == 0):
        return None
    seconds = latency_ms * 1e-3
    if t_mem >= t_comp:                 # t_mem > 0, so the traffic is known
        achieved = cast(int, traffic) / seconds / 1e12
        return LimitFraction(achieved / peaks.copy_tbs, "memory", achieved, peaks.copy_tbs, "TB/s",
                             f"copy bandwidth ({peaks.source()})")
    achieved = cast(int, flops) / seconds / 1e12     # t_comp > 0, so the FLOPs and their dtype are known
    limit = peaks.peak_tflops(cast(str, dtype))
    return LimitFraction(achieved / limit, "compute", achieved, limit, "TFLOP/s",
                         f"{dtype} tensor peak ({peaks.source(dtype)})")


def compute_rate(task: Any, workload: Any, latency_ms: float, peaks: Peaks) -> tuple[float, float] | None:
    """(TFLOP/s on the task's useful FLOPs, fraction of its tensor peak) at `latency_ms`, whichever limit
    binds: a compute-bound task's report shows its % of the bf16 peak on small, memory-bound rows too.
    None when the task declares no FLOPs or compute dtype, or the latency is not positive."""
    flops, dtype = task.flops(workload), task.compute_dtype
    if not flops or not dtype or latency_ms is None or latency_ms <= 0:
        return None
    tflops = flops / (latency_ms * 1e-3) / 1e12
    return tflops, tflops / peaks.peak_tflops(dtype)


def physical_floor_ms(task: Any, workload: Any, peaks: Peaks | None = H200_DATASHEET, *, device: str = "cuda",
                      safety: float = 0.8) -> float:
    """The lowest latency physics allows for this workload, times `safety` (< 1) so that no honest kernel
    is ever under it: max(traffic / the datasheet's HBM bandwidth, FLOPs / the datasheet's highest dense
    tensor peak, whatever the task's dtype). Pass datasheet peaks (`datasheet_for(gpu name)`), not measured
    ones. 0.0 (no floor) off the GPU (`device` not cuda) or when `peaks` is None (a GPU without a datasheet
    entry)."""
    if peaks is None or not str(device).startswith("cuda"):
        return 0.0
    traffic, flops, _ = _work(task, workload)
    t_mem = traffic / (peaks.copy_tbs * 1e12) if traffic else 0.0
    t_comp = flops / (max(peaks.tflops.values()) * 1e12) if flops else 0.0
    return safety * max(t_mem, t_comp) * 1e3


def measure_peaks(device: str = "cuda", *, matmul_size: int = 8192, copy_bytes: int = 1 << 30) -> Peaks | None:
    """Copy bandwidth and bf16 / fp8 / fp32 matmul rates measured now, in this process; None off the GPU.

    A rate that cannot be measured here (e.g. no FP8 matmul in this torch) falls back to the device's
    datasheet value, or to the H200's, and is named "datasheet".
    """
    import torch

    if not str(device).startswith("cuda") or not torch.cuda.is_available():
        return None
    import statistics

    def time_cuda(fn: Callable[[], Any], warmup: int, iterations: int) -> float:
        """Median GPU ms per call from CUDA events around each eager call (calls here last >= 0.3 ms, so
        launch gaps do not enter). Not the evaluator's graph clock: a 1 GiB copy timed that way gave 2.72
        TB/s on the H200 where an independent eager copy gave 4.22 (issue 20; scripts/peaks_check.py)."""
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(iterations):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    dev = torch.device(device)
    name = torch.cuda.get_device_name(dev)
    sheet = datasheet_for(name) or H200_DATASHEET
    with torch.cuda.device(dev):
        # Copy bandwidth: bytes read + written by the fastest of two copies of a buffer far beyond L2 (the
        # runtime's device-to-device memcpy and an elementwise kernel), each timed on its own.
        src = torch.rand(copy_bytes // 4, device=dev)
        dst = torch.empty_like(src)
        copy_ms = min(time_cuda(lambda: dst.copy_(src), warmup=3, iterations=20),  # noqa: F821 - run before the del
                      time_cuda(lambda: torch.mul(src, 1.0, out=dst),  # noqa: F821 - run before the del
                                warmup=3, iterations=20))
        copy_tbs = 2 * copy_bytes / (copy_ms * 1e-3) / 1e12
        del src, dst
        n = matmul_size
        mm_flops = 2 * n ** 3
        tflops, sources = dict(sheet.tflops), {k: "datasheet" for k in sheet.tflops}

        def rate(fn: Callable[[], Any]) -> float:
            return mm_flops / (time_cuda(fn, warmup=3, iterations=10) * 1e-3) / 1e12

        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        tflops["bf16"], sources["bf16"] = rate(lambda: a @ b.t()), "measured"  # noqa: F821 - run before the del
        try:
            a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
            one = torch.ones((), device=dev, dtype=torch.float32)
            tflops["fp8"] = rate(
                lambda: torch._scaled_mm(a8, b8.t(), one, one, out_dtype=torch.bfloat16))  # noqa: F821 - before the del
            sources["fp8"] = "measured"
            del a8, b8
        except (RuntimeError, TypeError, AttributeError):
            pass
        af, bf = a.float(), b.float()
        del a, b
        allow = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            tflops["fp32"], sources["fp32"] = rate(lambda: af @ bf.t()), "measured"  # noqa: F821 - run before the del
        finally:
            torch.backends.cuda.matmul.allow_tf32 = allow
        del af, bf
        torch.cuda.empty_cache()
    return Peaks(name, copy_tbs, tflops, "measured", sources)
