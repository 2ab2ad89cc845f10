"""What measured a number: device, clocks, driver and library versions, recorded with every measurement.

A latency means little without the machine behind it: a GPU at a lower clock, another driver or another
FlashInfer version gives other numbers. `describe(device)` runs inside the worker (it may touch the GPU;
the parent never does) and is cached except for the clocks, which `clocks()` reads again at the end of
each job. Every probe is optional: a missing NVML or nvidia-smi leaves its keys out, never fails a job.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import subprocess
from typing import Any

_STATIC: dict[str, dict[str, Any]] = {}


def _version(dist: str, module: str | None = None) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        pass
    if module:
        try:
            mod = __import__(module)
            return str(getattr(mod, "__version__", "?"))
        except Exception:  # noqa: BLE001 - a version is a note: a broken install reads as unknown
            return None
    return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvml_handle(index: int) -> Any:
    """NVML's handle for CUDA device `index`, found by UUID (NVML ignores CUDA_VISIBLE_DEVICES)."""
    import pynvml  # nvidia-ml-py; flashinfer and torch's clock_rate use it too

    pynvml.nvmlInit()
    try:
        import torch

        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        if uuid is not None:
            return pynvml, pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
    except Exception:  # noqa: BLE001 - no UUID lookup here: by index below
        pass
    return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)


def clocks(device: str) -> dict[str, Any]:
    """Current SM and memory clocks (MHz), temperature and power of the GPU; {} on a CPU or without NVML."""
    if not device.startswith("cuda"):
        return {}
    import torch

    index = torch.cuda.current_device()
    out: dict[str, Any] = {}
    try:
        nv, h = _nvml_handle(index)
        out["sm_clock_mhz"] = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
        out["mem_clock_mhz"] = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
        out["max_sm_clock_mhz"] = nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)
        out["temperature_c"] = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
        out["power_w"] = round(nv.nvmlDeviceGetPowerUsage(h) / 1000.0, 1)
        return out
    except Exception:  # noqa: BLE001 - no NVML here: nvidia-smi is asked below
        pass
    try:
        props = torch.cuda.get_device_properties(index)
        ident = f"GPU-{props.uuid}" if getattr(props, "uuid", None) is not None else str(index)
        q = subprocess.run(["nvidia-smi", f"--id={ident}", "--query-gpu=clocks.sm,clocks.mem,clocks.max.sm,"
                            "temperature.gpu,power.draw", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=10)
        vals = [v.strip() for v in q.stdout.strip().split(",")]
        keys = ["sm_clock_mhz", "mem_clock_mhz", "max_sm_clock_mhz", "temperature_c", "power_w"]
        for k, v in zip(keys, vals):
            try:
                out[k] = float(v)
            except ValueError:
                pass
    except Exception:  # noqa: BLE001 - the clocks are a note in the report, best effort
        pass
    return out


def _driver_version() -> str | None:
    try:
        nv, _ = _nvml_handle(0)
        v = nv.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # noqa: BLE001 - no NVML here: nvidia-smi is asked below
        pass
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=10)
        return q.stdout.strip().splitlines()[0] if q.returncode == 0 and q.stdout.strip() else None
    except Exception:  # noqa: BLE001 - no nvidia-smi: the driver version is unknown
        return None


def describe(device: str) -> dict[str, Any]:
    """Device, versions and (GPU) clocks. The static part is computed once per process."""
    import torch

    key = device
    if key not in _STATIC:
        env: dict[str, Any] = {
            "device": device, "python": platform.python_version(), "torch": torch.__version__,
            "triton": _version("triton", "triton"), "numpy": _version("numpy", "numpy"),
            "flashinfer": _version("flashinfer-python") or _version("flashinfer") or "not installed",
            "host": platform.node(), "cpu": _cpu_model(), "cpu_count": os.cpu_count(),
        }
        if device.startswith("cuda"):
            idx = torch.cuda.current_device()
            props = torch.cuda.get_device_properties(idx)
            env.update({
                "gpu": props.name, "capability": f"{props.major}.{props.minor}",
                "sm_count": props.multi_processor_count, "gpu_memory_gb": round(props.total_memory / 2**30, 1),
                "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0) or None,
                "cuda": torch.version.cuda, "driver": _driver_version(),
                "timer": "CUDA events, cold L2 (flush of twice the L2) before each iteration",
            })
        else:
            env["mode"] = ("Triton interpreter (TRITON_INTERPRET=1)" if os.environ.get("TRITON_INTERPRET") == "1"
                           else "CPU")
            env["timer"] = "wall clock (time.perf_counter) per call"
            env["torch_threads"] = torch.get_num_threads()
        _STATIC[key] = env
    from ksearch.eval.isolation.walls import current

    plan = current()              # the kernel walls around this worker's candidates (ksearch.eval.isolation.walls)
    sandbox = {"sandbox": plan.describe()} if plan is not None else {}
    return {**_STATIC[key], **clocks(device), **sandbox}
