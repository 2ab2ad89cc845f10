"""GPU: the kernel's walls (ksearch.eval.isolation.walls) leave CUDA, Triton's compiler and CUDA extension builds working.
Run on a CUDA host:

    PYTHONPATH=$PWD python -m pytest -q -s -m gpu tests/test_walls_gpu.py

Prints the walls plan the fork server applied (as root in a VM: every wall, uid nobody if nobody can read the
Python install and /dev/nvidia*), and the cost of a walled child with CUDA init and a Triton compile.
"""

from __future__ import annotations

import glob
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from ksearch.eval.isolation.forkserver import ForkServer

pytestmark = pytest.mark.gpu


def walled_gpu_work(conn, outside: str) -> None:
    import triton
    import triton.language as tl

    t0 = time.perf_counter()

    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)

    x = torch.zeros(1000, device="cuda")
    add_one[(4,)](x, 1000, BLOCK=256)               # ptxas and cc (Triton's launcher) run inside the walls
    torch.cuda.synchronize()
    try:
        open(outside, "w").write("x")
        wrote = "written"
    except OSError as e:
        wrote = e.strerror
    conn.send({"ok": bool((x == 1).all()), "uid": os.getuid(), "ms": (time.perf_counter() - t0) * 1e3,
               "outside": wrote, "devices": sorted(glob.glob("/dev/nvidia*")),
               "cache": sorted(p.name for p in Path(os.environ["TRITON_CACHE_DIR"]).iterdir())})


def test_cuda_and_triton_work_inside_the_walls(tmp_path):
    outside = f"/tmp/ksearch_walls_gpu_{os.getpid()}"
    with ForkServer(interpret=False) as server:
        plan = server.walls_plan
        print(f"\nwalls on this GPU host: {plan.describe() if plan else 'none'}")
        child = server.spawn("tests.test_walls_gpu:walled_gpu_work", outside, tmp_path / "scratch")
        assert child.conn.poll(600), child.output()[0][-4000:]
        info = child.conn.recv()
        assert child.wait(60) == 0, child.output()[0][-4000:]
    print(f"walled child: uid {info['uid']}, CUDA init + Triton compile + launch {info['ms']:.0f} ms; "
          f"devices {info['devices']}")
    assert info["ok"] and info["cache"], info
    if plan is not None and (plan.mount or plan.landlock_abi):
        assert info["outside"] != "written" and not os.path.exists(outside), info
    if os.path.exists(outside):
        os.unlink(outside)


@pytest.mark.cuda_build
def test_a_cuda_solution_builds_and_passes_inside_the_walls():
    """ksearch's CUDA builder runs torch's extension builder (ninja, nvcc, the host compiler) in the
    candidate's walled process: everything it writes goes to the scratch tmpfs."""
    from torch.utils import cpp_extension

    if shutil.which("nvcc") is None and not cpp_extension.CUDA_HOME:
        pytest.skip("no nvcc here")
    from ksearch.eval.parent.evaluator import EvalSettings, Evaluator
    from ksearch.eval.report import BaselineTimes, Status
    from ksearch.task import load_task

    task = load_task("gqa_paged_decode_h32_kv4_d128_ps1")
    source = (Path(__file__).resolve().parents[1] / "examples" / "gqa_decode_naive.cu").read_text()
    workloads = task.workload_set("tiny")
    base = BaselineTimes("cuda", {"reference": {w.name: 1.0 for w in workloads}}, "fixed 1 ms")
    with Evaluator(task, EvalSettings(device="cuda", timeout_s=900, trials=2, check_trials=2)) as ev:
        r = ev.evaluate(source, "gqa_naive_cuda", workloads, base)
    print(f"\nCUDA solution inside the walls: {r.summary()}; sandbox: {r.env.get('sandbox')}")
    assert r.status == Status.PASSED, r.summary() + r.log[-4000:]
