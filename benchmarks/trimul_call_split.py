"""Where a TriMul call's time goes, host against GPU, on GPUMode's smaller ranked cases (issue 25).

GPUMode's clock (CUDA events around one eager call) counts the host's work whenever the host, not the GPU, is
the slower of the two: session 29's three H100s timed the same kernels 0.40-0.71 ms on the 256 x 256 x 2 case
while the larger cases agreed within 3%. Per subject and case this prints:
  - the kernels' GPU time per call (torch.profiler), and the top kernels;
  - the host's time to issue one call (perf_counter around run() with the GPU kept busy beforehand, so the
    host never waits on it);
  - the GPUMode-style event time (synchronise, flush L2, events around the call): median and min of 20;
  - the host operations by self CPU time.
If the event time tracks the host time rather than the kernel time, the host path is what to cut.

    PYTHONPATH=. python3 benchmarks/trimul_call_split.py [LABEL=FAMILY:knob~value,knob~value ...]

Subjects: gemm_input_pass and cublas_contraction at their defaults, gemm_input_pass with session 29's host-side
weight folding (a dozen torch operations, `torch_fold`) beside the one `_fold_weights` launch, and any given
on the command line (`~` between a knob and its value). GPU only.
"""
from __future__ import annotations

import sys
import time

import torch

from ksearch.instantiate.loader import load_module_from_source
from ksearch.task import Workload, load_task
from ksearch.task.catalog import load_catalog

#: (S, B, D, masked, distribution): GPUMode's ranked cases below S = 1024.
CASES = [(256, 2, 128, False, "normal"), (256, 2, 384, True, "normal"), (512, 1, 128, False, "normal"),
         (768, 1, 128, False, "cauchy")]


def parse_subject(spec: str) -> tuple[str, str, dict]:
    label, rest = spec.split("=", 1)
    family, _, knob_spec = rest.partition(":")
    knobs: dict = {}
    for item in filter(None, knob_spec.split(",")):
        key, value = item.split("~")
        knobs[key] = int(value) if value.lstrip("-").isdigit() else value
    return label, family, knobs


def torch_fold(mod):
    """Session 29's host-side weight folding for gemm_input_pass, to set beside `_fold_weights`."""
    def gemm_weights(norm_weight, norm_bias, lp, rp, lg, rg, og):
        hidden, dim = lp.shape
        gates = torch.stack([torch.zeros_like(og), og], dim=1).view(2 * hidden, dim) if mod.GATE_HMAJOR else og
        w = torch.cat([torch.stack([lp, lg], dim=1).view(2 * hidden, dim),
                       torch.stack([rp, rg], dim=1).view(2 * hidden, dim), gates])
        folded = torch.empty(dim, w.shape[0], dtype=mod.GEMM_DTYPE, device=w.device)
        folded.copy_((w * norm_weight).t())
        bias = torch.mv(w, norm_bias)
        if mod.GATE_HMAJOR:
            bias[4 * hidden::2] = 1.0
        return folded, bias, (folded.float().sum(dim=0) if mod.MODE == 2 else None)
    return gemm_weights


def split_one(mod, inp, flush) -> tuple[float, float, float, list, list]:
    """(kernel ms, host issue ms, event ms, top kernels, top host operations) of one subject on one case."""
    for _ in range(3):
        mod.run(**inp)
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CUDA, torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(5):
            mod.run(**inp)
        torch.cuda.synchronize()
    gpu, cpu = [], []
    for e in prof.key_averages():
        if getattr(e, "self_device_time_total", 0) > 0:
            gpu.append((e.self_device_time_total / 5e3, e.key[:60], e.count // 5))
        if e.self_cpu_time_total > 0:
            cpu.append((e.self_cpu_time_total / 5e3, e.key[:60], e.count // 5))
    gpu.sort(reverse=True)
    cpu.sort(reverse=True)
    host = []
    for _ in range(10):
        torch.cuda._sleep(50_000_000)                    # the GPU busy for ~30 ms: the host never waits on it
        t0 = time.perf_counter()
        mod.run(**inp)
        host.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
    events = []
    for _ in range(20):
        torch.cuda.synchronize()
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        mod.run(**inp)
        end.record()
        torch.cuda.synchronize()
        events.append(start.elapsed_time(end))
    host.sort()
    events.sort()
    return sum(g[0] for g in gpu), host[len(host) // 2], events[len(events) // 2], gpu, cpu


def main(argv: list[str]) -> int:
    if not torch.cuda.is_available():
        print("error: this measures GPU calls; run it on a GPU host", file=sys.stderr)
        return 2
    task = load_task("trimul_outgoing_h128")
    cat = load_catalog(task.strategies_dir, task.name)
    subjects = [("gemm", "gemm_input_pass", {}), ("cublas", "cublas_contraction", {})]
    try:
        subjects += [parse_subject(a) for a in argv]
    except ValueError:
        print("error: subjects are LABEL=FAMILY:knob~value,knob~value", file=sys.stderr)
        return 2
    mods = {label: load_module_from_source(cat.render(fam, knobs), name_hint=f"split_{label}")
            for label, fam, knobs in subjects}
    mods["gemm_torch_fold"] = load_module_from_source(cat.render("gemm_input_pass", {}), name_hint="split_tf")
    mods["gemm_torch_fold"]._gemm_weights = torch_fold(mods["gemm_torch_fold"])
    flush = torch.empty(128 * 2**20, dtype=torch.uint8, device="cuda")
    for s, b, d, masked, dist in CASES:
        w = Workload(name=f"s{s}_b{b}_d{d}", axes={"B": b, "S": s, "D": d},
                     params={"masked": masked, "distribution": dist})
        inp = task.make_inputs(w, device="cuda", seed=1)
        for label, mod in mods.items():
            kernels, host, event, gpu, cpu = split_one(mod, inp, flush)
            print(f"== {label} {w.name}: kernels {kernels:.3f} ms/call, host issue {host:.3f} ms, "
                  f"events {event:.3f} ms", flush=True)
            for ms, name, n in gpu[:6]:
                print(f"   gpu {ms:8.3f} ms  x{n}  {name}")
            for ms, name, n in cpu[:12]:
                print(f"   cpu {ms:8.3f} ms  x{n}  {name}")
        del inp
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
