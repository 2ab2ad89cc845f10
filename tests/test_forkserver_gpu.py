"""GPU: per-candidate overhead of a fresh forked process with CUDA init, with and without the audit hook;
a killed child gives its GPU memory back. Run on a CUDA host:

    PYTHONPATH=$PWD python -m pytest -q -s -m gpu tests/test_forkserver_gpu.py

Prints one line per configuration: spawn -> target, CUDA init, first kernel (Triton compile + launch into a
fresh per-child cache, or a copy of a seed cache warmed by the trusted side, as the evaluator does),
spawn -> reaped; medians over the children. The children run inside the kernel's walls (ksearch.eval.isolation.walls);
the plan is printed.
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch
import triton
import triton.language as tl

from ksearch.eval.candidate.audit import AuditPolicy
from ksearch.eval.isolation.forkserver import ForkServer

pytestmark = pytest.mark.gpu


@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


# ---- runs in the child ------------------------------------------------------------------------------------
def cuda_tiny(conn, payload) -> None:
    t_start = time.perf_counter()
    initialised_before = torch.cuda.is_initialized()       # must be False: the zygote never touched CUDA
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t_cuda = time.perf_counter()
    x = torch.zeros(1000, device="cuda")
    _add_one[(triton.cdiv(1000, 256),)](x, 1000, BLOCK=256)
    y = x * 2
    torch.cuda.synchronize()
    t_kernel = time.perf_counter()
    conn.send({"start": t_start, "cuda_ms": (t_cuda - t_start) * 1e3, "kernel_ms": (t_kernel - t_cuda) * 1e3,
               "ok": bool((y == 2).all()), "initialised_before": initialised_before})


def hold_memory(conn, nbytes: int) -> None:
    block = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    conn.send("holding")
    time.sleep(600)


def free_memory(conn, payload) -> None:
    free, _ = torch.cuda.mem_get_info()
    conn.send(free)


# ---- runs in pytest ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server():
    with ForkServer(preload=["tests.test_forkserver_gpu"], interpret=False) as s:
        yield s


def _warm_seed(seed) -> None:
    """What CandidateSpawner.warm_triton_cache does: compile here (trusted), children get a copy."""
    import os

    previous = os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(seed)
    try:
        x = torch.zeros(1000, device="cuda")
        _add_one[(triton.cdiv(1000, 256),)](x, 1000, BLOCK=256)
        torch.cuda.synchronize()
    finally:
        if previous is None:
            os.environ.pop("TRITON_CACHE_DIR", None)
        else:
            os.environ["TRITON_CACHE_DIR"] = previous


@pytest.mark.parametrize("audited", [False, True], ids=["plain", "audit-hook"])
@pytest.mark.parametrize("cache", ["fresh", "seeded"])
def test_per_candidate_overhead_with_cuda(server, tmp_path, audited, cache):
    seed = tmp_path / "seed_triton_cache"
    seed.mkdir()
    if cache == "seeded":
        _warm_seed(seed)
    rows = []
    for i in range(6):
        scratch = tmp_path / f"c{i}"
        policy = AuditPolicy(scratch_dir=str(scratch)) if audited else None
        t0 = time.perf_counter()
        child = server.spawn("tests.test_forkserver_gpu:cuda_tiny", None, scratch, audit=policy,
                             seeds={"triton": str(seed)} if cache == "seeded" else None)
        assert child.conn.poll(300), child.output()[0][-3000:]
        info = child.conn.recv()
        assert child.wait(60) == 0, child.output()[0][-3000:]
        assert info["ok"] and not info["initialised_before"], info
        assert child.audit_violations() == []
        rows.append((info["start"] - t0, info["cuda_ms"], info["kernel_ms"], time.perf_counter() - t0))
    med = [statistics.median(r[k] for r in rows[1:]) for k in range(4)]
    print(f"\nwalls: {server.walls_plan.describe() if server.walls_plan else 'none'}")
    print(f"\nGPU child ({server.isolation}, {'audit hook' if audited else 'no hook'}, {cache} Triton cache): "
          f"spawn->target {med[0] * 1e3:.1f} ms, CUDA init {med[1]:.1f} ms, first kernel {med[2]:.1f} ms, "
          f"spawn->reaped {med[3] * 1e3:.1f} ms (median of 5)")


def test_killed_child_gives_gpu_memory_back(server, tmp_path):
    probe = server.spawn("tests.test_forkserver_gpu:free_memory", None, tmp_path / "p0")
    before = probe.conn.recv()
    probe.wait(60)
    holder = server.spawn("tests.test_forkserver_gpu:hold_memory", 4 << 30, tmp_path / "h")
    assert holder.conn.poll(120) and holder.conn.recv() == "holding"
    holder.kill()
    time.sleep(0.5)
    probe = server.spawn("tests.test_forkserver_gpu:free_memory", None, tmp_path / "p1")
    after = probe.conn.recv()
    probe.wait(60)
    assert after > before - (1 << 30), (before, after)
