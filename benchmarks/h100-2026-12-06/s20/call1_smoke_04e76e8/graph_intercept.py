"""Session 20 diagnosis (issue 21's self-check): does a CUDA-graph replay of n x [flush, call] cost a fixed
amount besides n times its per-call cost, and how does it depend on n and on the nodes per call?"""
import statistics
import time

import numpy as np
import torch

from ksearch.eval.clocks.gputime import flush_buffer, flush_costs, wake

dev = torch.device("cuda", 0)
flush = flush_buffer(dev)
x = torch.randn(1 << 19, device=dev)          # 2 MiB read, 2 MiB written: a few-µs memory-bound call
y = torch.empty_like(x)


def small():
    y.copy_(x)


def body(kind):
    if kind == "flush+call":
        flush.zero_(); small()
    elif kind == "flush":
        flush.zero_()
    elif kind == "call":
        small()
    elif kind == "flush+2calls":
        flush.zero_(); small(); small()


def wall(g, trials=7):
    out = []
    for _ in range(trials):
        wake(dev, 10.0)
        t0 = time.perf_counter(); g.replay(); torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


ns = [125, 250, 500, 1000, 1500, 2000, 3000]
for kind in ["flush+call", "flush", "call", "flush+2calls"]:
    rows = []
    for n in ns:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(n):
                body(kind)
        g.replay(); torch.cuda.synchronize()
        w = wall(g)
        rows.append((n, min(w), statistics.median(w)))
        del g
    n_ = np.array([r[0] for r in rows], float)
    for col, label in ((1, "min"), (2, "median")):
        yv = np.array([r[col] for r in rows])
        slope, icpt = np.polyfit(n_, yv, 1)
        print(f"{kind:14s} {label:6s} slope {slope*1e3:8.3f} us/call  intercept {icpt:7.3f} ms  "
              + " ".join(f"{int(r[0])}:{r[col]/r[0]*1e3:.3f}" for r in rows), flush=True)
f = flush_costs()
print("flush_costs", f)
