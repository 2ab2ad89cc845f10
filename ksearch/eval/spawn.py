"""Fresh processes for candidates, as the judge needs them: `CandidateSpawner.spawn(target, payload)`.

Each child gets its own scratch folder (the only place it may write), its own captured output and a
connection to the judge; `Child.kill()` ends it and every process it started. The children come from the
fork server (ksearch.eval.forkserver), which has torch and triton imported already, so a fresh process
per candidate costs milliseconds rather than an interpreter start.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any


class CandidateSpawner:
    def __init__(self, *, interpret: bool, memory_limit_bytes: int | None = None):
        from ksearch.eval.forkserver import ForkServer

        self.root = Path(tempfile.mkdtemp(prefix="ksearch_scratch_"))
        self.server = ForkServer(preload=["ksearch.eval.candidate"], interpret=interpret,
                                 memory_limit_bytes=memory_limit_bytes)
        self.count = 0

    def spawn(self, target: str, payload: dict[str, Any]) -> Any:
        self.count += 1
        scratch = self.root / f"c{self.count}"
        scratch.mkdir(parents=True, exist_ok=True)
        payload = dict(payload, scratch=str(scratch))
        return self.server.spawn(target, payload, scratch)

    def close(self) -> None:
        try:
            self.server.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
