"""The harness's profile pieces inside a real candidate sandbox (fork server, walls, audit hook that records
instead of ending the process): reading the Triton cache in scratch and starting and stopping the profiler
refuse nothing, since a refusal there would be recorded as tampering. On a CPU the profiler's CUDA activity
records no launches; the GPU run of the whole pass is tests/test_profile_gpu.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ksearch.eval.candidate.audit import AuditPolicy
from ksearch.eval.isolation.forkserver import ForkServer

CUBIN = Path(__file__).parent / "fixtures" / "cubin" / "spills_24regs_sm90.cubin"


def profile_pieces(conn, _payload) -> None:
    """Target, in the sandboxed child: what the harness's `profile` op does besides calling a kernel."""
    import torch

    from ksearch.eval.candidate import audit
    from ksearch.profile.launches import profile_call
    from ksearch.profile.triton_cache import read_triton_cache

    kernels = read_triton_cache(os.environ.get("TRITON_CACHE_DIR"))
    x = torch.ones(1000)
    launches = profile_call(lambda: x * 2, lambda: None, lambda: None, activities=("CPU", "CUDA"))
    conn.send((kernels, launches, list(audit.violations)))


@pytest.fixture(scope="module")
def server():
    with ForkServer(interpret=True) as s:
        yield s


def test_the_profile_pieces_refuse_nothing_in_the_sandbox(server, tmp_path):
    cache = tmp_path / "cache" / "HASH"
    cache.mkdir(parents=True)
    (cache / "big.json").write_text(json.dumps({"name": "big", "num_warps": 1, "num_stages": 3, "shared": 0}))
    (cache / "big.cubin").write_bytes(CUBIN.read_bytes())
    scratch = tmp_path / "scratch"
    child = server.spawn("tests.test_profile_sandbox:profile_pieces", None, scratch,
                         audit=AuditPolicy(scratch_dir=str(scratch), fatal=False),
                         seeds={"triton": str(tmp_path / "cache")})
    try:
        assert child.conn.poll(120), child.output()[0][-3000:]
        kernels, launches, violations = child.conn.recv()
        assert violations == [], violations
        assert kernels == [{"name": "big", "num_warps": 1, "num_stages": 3, "shared_memory_bytes": 0,
                            "registers_per_thread": 24, "spilled_bytes": 168}]
        assert launches == []               # no GPU: nothing ran on one
        assert child.wait(30) == 0, child.output()[0][-3000:]
    finally:
        child.kill()
