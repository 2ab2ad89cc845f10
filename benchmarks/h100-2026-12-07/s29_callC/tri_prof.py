"""Session 29 scratch: where TriMul's time goes, kernel by kernel (torch.profiler), for gemm_input_pass's
defaults and the resident mode at S=1024, D=128 and D=384. With --ncu: each subject's calls once (for ncu)."""
import sys
import torch
from ksearch.task import Workload, load_task
from ksearch.task.catalog import load_catalog
from ksearch.instantiate.loader import load_module_from_source

task = load_task("trimul_outgoing_h128")
cat = load_catalog(task.strategies_dir, task.name)
SUBJECTS = {"gemm": ("gemm_input_pass", {}),
            "res2": ("gemm_input_pass", {"input_mode": "resident", "gemm_block_m": 128, "gemm_block_n": 64,
                                         "gemm_warps": 8, "resident_max_chunks": 2}),
            "res3": ("gemm_input_pass", {"input_mode": "resident", "gemm_block_m": 128, "gemm_block_n": 128,
                                         "gemm_warps": 8}),
            "cublas": ("cublas_contraction", {})}
CASES = [(1024, 1, 128, False, "cauchy"), (1024, 1, 384, False, "normal")]
ncu = "--ncu" in sys.argv
mods = {k: load_module_from_source(cat.render(f, kn), name_hint=f"prof_{k}") for k, (f, kn) in SUBJECTS.items()}
for s, b, d, masked, dist in CASES:
    w = Workload(name=f"s{s}d{d}", axes={"B": b, "S": s, "D": d}, params={"masked": masked, "distribution": dist})
    inp = task.make_inputs(w, device="cuda", seed=1)
    for label, mod in mods.items():
        if label == "res3" and d == 128:
            continue
        for _ in range(1 if ncu else 2):
            mod.run(**inp)
        torch.cuda.synchronize()
        if ncu:
            continue
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                mod.run(**inp)
            torch.cuda.synchronize()
        rows = []
        for e in prof.key_averages():
            if e.device_type == torch.autograd.DeviceType.CUDA or getattr(e, "self_device_time_total", 0) > 0:
                t = getattr(e, "self_device_time_total", 0) / 5
                if t > 0:
                    rows.append((t, e.key[:70], e.count // 5))
        rows.sort(reverse=True)
        total = sum(r[0] for r in rows)
        print(f"== {label} {w.name}: {total / 1e3:.3f} ms of kernels per call")
        for t, k, n in rows[:10]:
            print(f"   {t / 1e3:8.3f} ms  x{n}  {k}")
    del inp
    torch.cuda.empty_cache()
