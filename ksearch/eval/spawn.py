"""Fresh processes for candidates, as the judge needs them: `CandidateSpawner.spawn(target, payload)`.

Each child gets its own scratch folder (the only place it may write, removed when it ends), its own
captured output and a connection to the judge; `kill()` ends it and every process it started. The
children come from the fork server (ksearch.eval.forkserver), which has torch and triton imported
already, so a fresh process per candidate costs milliseconds rather than an interpreter start. The
candidate's harness installs the audit hook itself, after it has read the task's files
(ksearch.eval.candidate), so the fork server is asked for none.

On a GPU, Triton builds a small C launcher helper with the host compiler the first time a process uses a
cache folder (seconds). The trusted worker builds it once into a seed folder, and each child gets a
private *copy* of that folder as its Triton cache: the build is not repeated, and no candidate can write
into a cache another candidate reads.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any


class SpawnedCandidate:
    """A forked child plus its scratch folder; the judge sees the fork server's Child interface."""

    def __init__(self, child: Any, scratch: Path):
        self._child, self.scratch = child, scratch
        self.conn = child.conn
        self.pid = getattr(child, "pid", None)

    def kill(self) -> None:
        try:
            self._child.kill()
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def exit_description(self) -> str:
        return self._child.exit_description()

    def output(self) -> tuple[str, int]:
        return self._child.output()

    def audit_violations(self) -> list[str]:
        return list(self._child.audit_violations())


class CandidateSpawner:
    def __init__(self, *, interpret: bool, memory_limit_bytes: int | None = None):
        from ksearch.eval.forkserver import ForkServer

        self.root = Path(tempfile.mkdtemp(prefix="ksearch_scratch_"))
        self.server = ForkServer(preload=["ksearch.eval.candidate"], interpret=interpret,
                                 memory_limit_bytes=memory_limit_bytes)
        self.count = 0
        self.seed_cache: Path | None = None

    def warm_triton_cache(self) -> None:
        """(GPU) Build Triton's launcher helpers once, in this trusted process, into the seed folder."""
        import os

        seed = self.root / "triton_seed"
        seed.mkdir(parents=True, exist_ok=True)
        previous = os.environ.get("TRITON_CACHE_DIR")
        os.environ["TRITON_CACHE_DIR"] = str(seed)
        try:
            import torch
            import triton
            import triton.language as tl

            @triton.jit
            def _touch(x_ptr):
                tl.store(x_ptr, tl.load(x_ptr) + 1)

            x = torch.zeros(1, device="cuda")
            _touch[(1,)](x)
            torch.cuda.synchronize()
            self.seed_cache = seed
        except Exception:       # no seed: each child builds its own helper, slower but correct
            self.seed_cache = None
        finally:
            if previous is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = previous

    def spawn(self, target: str, payload: dict[str, Any]) -> SpawnedCandidate:
        self.count += 1
        scratch = self.root / f"c{self.count}"
        scratch.mkdir(parents=True, exist_ok=True)
        if self.seed_cache is not None:
            shutil.copytree(self.seed_cache, scratch / "triton", dirs_exist_ok=True)
        payload = dict(payload, scratch=str(scratch))
        return SpawnedCandidate(self.server.spawn(target, payload, scratch), scratch)

    def close(self) -> None:
        try:
            self.server.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
