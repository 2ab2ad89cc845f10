"""Where does a GPU timing window's input phase go? The same reveal, timed in the judge's process and in
walled children of the fork server (without and with the audit hook).

    python3 scripts/reveal_diagnose.py [TASK [WORKLOAD ...]]     # on a GPU host, as the judge runs there
    python3 scripts/reveal_diagnose.py --stages [TASK [WORKLOAD ...]]

`--stages` bisects by what a candidate's process holds: in one walled child (audit hook on) it builds up the
state the harness reaches in an evaluation - input sets only; a catalog kernel loaded and warmed up (the
harness' `pool`); its CUDA graphs captured (`capture`, kernel counting on as the judge asks); graph replays
and output copies between reveals (what consecutive windows do); the same with graphs captured without the
debug mode - and after each stage times the window's input generation with the harness' own `reveal_probe`
(host time, GPU event time, the caching allocator's cudaMalloc/cudaFree/device-wide-sync counters), after a
50 ms idle pause as between two windows. The stage at which generation slows is the cause's neighbourhood.

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
IDLE_MODES = tuple(os.environ.get("REVEAL_IDLE", ",sleep,sleep+shortwake,sleep+wake,busy_wait").split(","))
DEFAULT_TASK = "gqa_paged_decode_h32_kv4_d128_ps1"
DEFAULT_WORKLOADS = ("fb_b1_t546", "fb_b64_t46287", "fb_b64_t28815")


def pause(mode: str, torch: Any) -> None:
    """What happens before each reveal: nothing (hot), a sleep (the process and the GPU go idle), a sleep
    then one round of the judge's writes (shortwake) or its whole wake (the GPU's clocks come back up, the
    process stays cold), or a CPU busy-wait (the process stays hot, the GPU goes idle)."""
    if mode == "sleep":
        time.sleep(0.05)
    elif mode.startswith("sleep+") and mode.endswith("wake"):
        from ksearch.eval.clocks.gputime import wake

        time.sleep(0.05)
        wake(min_ms=0.0) if mode == "sleep+shortwake" else wake()     # one round of writes, or the judge's wake
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
                pause(idle, torch)      # the host part of make_inputs alone, after the same pause
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


class _NoWire:
    """The harness' server is driven directly here: it never receives or sends."""

    def recv(self) -> Any:
        raise EOFError

    def send(self, reply: Any) -> None:
        return None


def _probe_summary(label: str, runs: list[dict[str, Any]]) -> str:
    """One line for a stage: medians and maxima of the probe's parts, the allocator's counters summed."""
    def col(key: str) -> str:
        v = [float(r[key]) for r in runs]
        return f"{key} {statistics.median(v):6.2f} [max {max(v):6.2f}]"

    alloc: dict[str, int] = {}
    for r in runs:
        for key, n in r.get("allocator", {}).items():
            alloc[key] = alloc.get(key, 0) + int(n)
    counts = " ".join(f"{key.removeprefix('num_')}={n}" for key, n in alloc.items())
    return f"{label:34s} " + "  ".join(col(k) for k in ("host_ms", "gpu_ms", "make_ms", "copy_ms", "sync_ms")) + \
        f"  | {counts}"


def staged_child(conn: Any, payload: dict[str, Any]) -> None:
    """In a walled child: the harness' state built up stage by stage, generation probed after each."""
    from ksearch.task.registry import load_task

    task = load_task(payload["task"])
    by_name = {w.name: w for name in ("feedback", "validate") for w in task.workload_set(name)}
    for wname in payload["workloads"]:
        _stages(task, by_name[wname], payload)


def _stages(task: Any, w: Any, payload: dict[str, Any]) -> None:
    import torch

    from ksearch.eval.candidate import harness
    from ksearch.eval.clocks import gputime
    from ksearch.instantiate.loader import load_entry_point

    trials, pause_s = int(payload.get("trials", 8)), float(payload.get("pause_s", 0.05))
    k = harness._Kernel({"device": "cuda"})
    k.task, k.names, k.input_names = task, task.definition.output_names, task.definition.input_names
    server = harness._Server(k, _NoWire())  # type: ignore[arg-type]  # only recv and send are read
    seeds = [100 + j for j in range(3)]
    k.workload = w
    k.pool = [server._make(s) for s in seeds]
    torch.cuda.synchronize()
    next_seed = [5000]

    def probe(label: str, between: Any = None) -> None:
        runs: list[dict[str, Any]] = []
        got: dict[str, Any] = {}
        for t in range(trials + 1):
            if between is not None:
                between()
            time.sleep(pause_s)
            got = server.reveal_probe({"seeds": [next_seed[0]]}, None)
            next_seed[0] += 16
            if t and got.get("ok"):
                runs.extend(got["runs"])
        line = _probe_summary(label, runs) if runs else f"{label:34s} no probe ({got.get('message')})"
        print(f"{w.name:16s} {line}  | reserved {torch.cuda.memory_reserved() / 2**20:.0f} MiB", flush=True)

    def window_like() -> None:
        """What happens in the candidate's process between two windows' generations: a replay, the outputs out."""
        k.timer.replay("call")
        torch.cuda.synchronize()
        for j in range(len(k.pool)):
            got = k.timer.capture.outputs[j]
            for o in got if isinstance(got, (list, tuple)) else [got]:
                o.cpu()

    probe("1 input sets only")
    k.fn = load_entry_point(payload["source"], name_hint="diag")
    server.pool({"workload": w, "seeds": seeds, "warmup": 3}, None)
    probe("2 kernel loaded, pool warmed up")
    n = int(payload.get("calls", 300))
    cap = server.capture({"n": n}, None)
    if not cap.get("captured"):
        print(f"{w.name:16s} capture failed: {cap.get('error')}", flush=True)
        return
    probe("3 graphs captured (debug mode)")
    probe("4 replays + output copies between", window_like)
    k.timer = gputime.GraphTimer(server._pool_call(), len(k.pool), n, flush=server._flush, count_kernels=False)
    k.timer.build()
    probe("5 as 4, graphs without debug mode", window_like)
    k.timer = None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    probe("6 graphs freed, empty_cache")


def in_stages(task_name: str, workloads: list[str]) -> None:
    """Spawn the staged child as the judge spawns a candidate (walls and the audit hook)."""
    os.environ["PYTHONPATH"] = os.pathsep.join([HERE] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    from ksearch.eval.candidate import audit as audit_module
    from ksearch.eval.isolation.forkserver import ForkServer
    from ksearch.task import snapshot
    from ksearch.task.catalog import load_catalog
    from ksearch.task.registry import load_task

    task = load_task(task_name)
    family = os.environ.get("REVEAL_FAMILY", "split_kv")
    source = load_catalog(task.dir / "strategies", task.name).render(family, {})
    server = ForkServer(preload=["ksearch.eval.candidate.harness", "reveal_diagnose"])
    print(f"fork server: {server.isolation_note}; kernel: {family} at its defaults", flush=True)
    snap = snapshot.pinned_named(task_name)
    scratch = tempfile.mkdtemp(prefix="reveal_stages_")
    os.chmod(scratch, 0o777)
    try:
        child_ = server.spawn("reveal_diagnose:staged_child",
                              {"task": task_name, "workloads": workloads, "source": source},
                              scratch, audit=audit_module.AuditPolicy(scratch_dir=scratch),
                              tasks=[snap] if snap is not None else None, timeout=120)
        child_.wait(400)
        out, code = child_.output()
        print(out.rstrip() or f"staged child: no output (exit {code})", flush=True)
    finally:
        server.close()


def main() -> int:
    args = sys.argv[1:]
    stages = "--stages" in args
    args = [a for a in args if a != "--stages"]
    task_name = args[0] if args else DEFAULT_TASK
    workloads = args[1:] or list(DEFAULT_WORKLOADS)
    if stages:
        in_stages(task_name, workloads)
        return 0
    for idle in IDLE_MODES:
        for line in measure(task_name, workloads, idle=idle):
            print(f"{'judge process' + (', ' + idle if idle else ''):28s} {line}", flush=True)
    in_children(task_name, workloads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
