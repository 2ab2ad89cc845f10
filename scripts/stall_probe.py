"""Where the judge's clock loses 2-45 ms a window (issue 21): host stalls, and what causes them.

Session 14's window breakdown put the lost time in CPU-bound phases only (the judge copying outputs out of
shared memory, the candidate generating inputs), in a different phase each window, about once per window of
60-160 ms: a stall of the host rather than slow work. This prints what the machine's control group and
scheduler say (CPU quota, throttling counters, NUMA, THP), then measures host stalls in a tight loop of small
CPU copies while a second process keeps the GPU busy, with the host's CUDA synchronisation spinning (the CUDA
default with few contexts) and blocking (CU_CTX_SCHED_BLOCKING_SYNC), reading cpu.stat around each.

    PYTHONPATH=. python3 scripts/stall_probe.py [--seconds 4]
"""

from __future__ import annotations

import argparse
import ctypes
import multiprocessing as mp
import os
import time
from pathlib import Path

from ksearch.eval.clocks.hoststall import cpu_stat, pressure_us

CGROUP = Path("/sys/fs/cgroup")
SCHED_BLOCKING_SYNC = 0x04


def read(path: str | Path) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as e:
        return f"({type(e).__name__}: {e.strerror})"


def describe() -> None:
    print("cgroup:", read("/proc/self/cgroup"))
    for name in ("cpu.max", "cpu.weight", "cpu.max.burst", "cpuset.cpus.effective", "memory.max"):
        print(f"{name}:", read(CGROUP / name))
    for name in ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us"):
        print(f"{name}:", read(CGROUP / name))
    print("cpu.stat:", cpu_stat())
    print("cpu pressure:", read("/proc/pressure/cpu").replace("\n", " | "))
    print("cpus:", os.cpu_count(), "affinity:", len(os.sched_getaffinity(0)))
    print("numa_balancing:", read("/proc/sys/kernel/numa_balancing"),
          "| thp:", read("/sys/kernel/mm/transparent_hugepage/enabled"),
          "| numa nodes:", len(list(Path("/sys/devices/system/node").glob("node[0-9]*"))))
    print("loadavg:", read("/proc/loadavg"))


def gpu_busy(mode: str, stop: mp.Event, ready: mp.Event) -> None:      # type: ignore[type-arg]
    """A candidate-like process: ~50 ms of GPU work, then a synchronisation, over and over."""
    if mode == "blocking":
        cuda = ctypes.CDLL("libcuda.so.1")
        assert cuda.cuInit(0) == 0
        dev = ctypes.c_int()
        assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
        rc = cuda.cuDevicePrimaryCtxSetFlags_v2(dev, SCHED_BLOCKING_SYNC)
        print(f"  (child: cuDevicePrimaryCtxSetFlags blocking sync -> {rc})", flush=True)
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    ready.set()
    while not stop.is_set():
        for _ in range(30):         # ~1.1 TFLOP: ~2 ms each at ~700 TFLOP/s
            a @ b
        torch.cuda.synchronize()


def stalls(seconds: float, label: str) -> None:
    import torch

    src = torch.randn(256 * 1024)          # 1 MiB of float32, like a window's outputs
    gaps = []
    before, psi0, t_end = cpu_stat(), pressure_us() or 0, time.perf_counter() + seconds
    last = time.perf_counter()
    while last < t_end:
        src.clone()
        now = time.perf_counter()
        gaps.append((now - last) * 1e3)
        last = now
    after, psi = cpu_stat(), (pressure_us() or 0) - psi0
    gaps.sort()
    big = [g for g in gaps if g > 2.0]
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in ("nr_periods", "nr_throttled", "throttled_usec",
                                                               "throttled_time", "usage_usec")}
    busy = delta["usage_usec"] / 1e6 / seconds if delta["usage_usec"] else float("nan")
    print(f"{label:<34} iters {len(gaps):>7}  median {gaps[len(gaps) // 2] * 1e3:7.1f} us  max {gaps[-1]:7.2f} ms  "
          f">2ms: {len(big):>3} (sum {sum(big):7.1f} ms)  cgroup: {delta}  ~{busy:.1f} CPUs busy  "
          f"cpu pressure (some) {psi / 1e3:.1f} ms", flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=4.0)
    args = p.parse_args()
    describe()
    stalls(args.seconds, "idle host")
    ctx = mp.get_context("spawn")
    for mode in ("spinning", "blocking"):
        stop, ready = ctx.Event(), ctx.Event()
        child = ctx.Process(target=gpu_busy, args=(mode, stop, ready))
        child.start()
        ready.wait(120)
        stalls(args.seconds, f"GPU busy, child sync {mode}")
        stop.set()
        child.join(30)
    # the judge's torch threads: one intra-op thread instead of the default pool
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    stalls(args.seconds, f"idle host, 1 torch thread (was {n})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
