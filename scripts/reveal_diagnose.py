"""Where does a GPU timing window's input phase go? The same reveal, timed in the judge's process and in
walled children of the fork server (without and with the audit hook).

    python3 scripts/reveal_diagnose.py [TASK [WORKLOAD ...]]     # on a GPU host, as the judge runs there

On the H200 (2026-12-05) the candidate's process said its inputs took 20-27 ms of a window where the judge's
own measurement of the same work was 3-4 ms, and the judge charged the difference to the candidate's calls
(GQA decode scored 0.69x instead of ~1.2x). Each line: where, workload, the median and spread of 8 reveals,
split into make_inputs (per part), copy into the captured sets, synchronisation.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

DEVICE = os.environ.get("REVEAL_DEVICE", "cuda")
IDLE_MODES = tuple(os.environ.get("REVEAL_IDLE", ",sleep,sleep+wake,busy_wait").split(","))
DEFAULT_TASK = "gqa_paged_decode_h32_kv4_d128_ps1"
DEFAULT_WORKLOADS = ("fb_b1_t546", "fb_b64_t46287", "fb_b64_t28815")


def pause(mode: str, torch: Any) -> None:
    """What happens before each reveal: nothing (hot), a sleep (the process and the GPU go idle), a sleep
    then the judge's wake (memory traffic: the GPU's clocks come back up, the process stays cold), or a CPU busy-wait (the
    process stays hot, the GPU goes idle)."""
    if mode == "sleep":
        time.sleep(0.05)
    elif mode == "sleep+wake":
        from ksearch.eval.clocks.gputime import wake

        time.sleep(0.05)
        wake()
    elif mode == "busy_wait":
        end = time.perf_counter() + 0.05
        while time.perf_counter() < end:
            pass


def measure(task_name: str, workloads: list[str], trials: int = 8, idle: str = "") -> list[str]:
    """Reveal timings in this process: one line per workload."""
    import torch

    from ksearch.eval.clocks.gputime import reveal
    from ksearch.task.registry import load_task

    def sync() -> None:
        if DEVICE == "cuda":
            torch.cuda.synchronize()

    task = load_task(task_name)
    by_name = {w.name: w for name in ("feedback", "validate") for w in task.workload_set(name)}
    names = task.definition.input_names
    lines = []
    for wname in workloads:
        w = by_name[wname]

        def make(seed: int, w: Any = w) -> list[Any]:
            src = task.make_inputs(w, device=DEVICE, seed=seed)
            return [src[n] for n in names]

        sets = [make(100 + j) for j in range(3)]
        mallocs = (torch.cuda.memory_stats().get("num_device_alloc", 0) if DEVICE == "cuda" else 0)
        sync()
        rows: dict[str, list[float]] = {"make": [], "copy": [], "sync": [], "total": []}
        for t in range(trials + 1):
            pause(idle, torch)
            parts: list[float] = []
            t0 = time.perf_counter()
            reveal(sets, make, [1000 + 10 * t + j for j in range(3)], parts)     # what a window does
            t2 = time.perf_counter()
            sync()
            t3 = time.perf_counter()
            if t:
                for key, ms in zip(("make", "copy", "sync", "total"),
                                   (*parts, (t3 - t2) * 1e3, (t3 - t0) * 1e3)):
                    rows[key].append(ms)
        if "kv_lens" in w.params:
            from ksearch.task.paged import paged_indices
            idx = []
            for t in range(trials):
                a = time.perf_counter()
                paged_indices(w.params["kv_lens"], w.axes["num_pages"], torch.Generator().manual_seed(t))
                idx.append((time.perf_counter() - a) * 1e3)
            rows["indices_cpu"] = idx
        cell = "  ".join(f"{k} {statistics.median(v):6.2f} [{min(v):.2f}-{max(v):.2f}]" for k, v in rows.items())
        if DEVICE == "cuda":
            mallocs = torch.cuda.memory_stats().get("num_device_alloc", 0) - mallocs
        lines.append(f"{wname:18s} {cell}  cudaMallocs {mallocs}  threads {torch.get_num_threads()}")
        del sets
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    return lines


def child(conn: Any, payload: dict[str, Any]) -> None:
    """In a walled child of the fork server."""
    for line in measure(payload["task"], payload["workloads"], idle=payload.get("idle", "")):
        print(f"{payload['label']:28s} {line}", flush=True)


def in_children(task_name: str, workloads: list[str]) -> None:
    os.environ["PYTHONPATH"] = os.pathsep.join([HERE] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    from ksearch.eval.candidate import audit as audit_module
    from ksearch.eval.isolation.forkserver import ForkServer
    from ksearch.task import snapshot

    server = ForkServer(preload=["ksearch.eval.candidate.harness", "reveal_diagnose"])
    print(f"fork server: {server.isolation_note}", flush=True)
    snap = snapshot.pinned_named(task_name)
    try:
        for label, audited in (("walled child, audit hook", True),):
            for idle in IDLE_MODES:
                scratch = tempfile.mkdtemp(prefix="reveal_diag_")
                os.chmod(scratch, 0o777)
                policy = audit_module.AuditPolicy(scratch_dir=scratch) if audited else None
                child_ = server.spawn("reveal_diagnose:child",
                                      {"task": task_name, "workloads": workloads, "idle": idle,
                                       "label": f"{label}{', ' + idle if idle else ''}"},
                                      scratch, audit=policy, tasks=[snap] if snap is not None else None,
                                      timeout=120)
                child_.wait(300)
                out, code = child_.output()
                print(out.rstrip() or f"{label}: no output (exit {code})", flush=True)
    finally:
        server.close()


def main() -> int:
    task_name = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_TASK
    workloads = sys.argv[2:] or list(DEFAULT_WORKLOADS)
    for idle in IDLE_MODES:
        for line in measure(task_name, workloads, idle=idle):
            print(f"{'judge process' + (', ' + idle if idle else ''):28s} {line}", flush=True)
    in_children(task_name, workloads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
