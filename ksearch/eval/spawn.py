"""Fresh processes for candidates, as the judge needs them: `CandidateSpawner.spawn(target, payload)`.

Each child gets its own scratch folder (the only place it may write, removed when it ends), its own
captured output and a connection to the judge; `kill()` ends it and every process it started. The
children come from the fork server (ksearch.eval.forkserver), which has torch and triton imported
already, so a fresh process per candidate costs milliseconds rather than an interpreter start. The
candidate's harness installs the audit hook itself, after it has read the task's files
(ksearch.eval.candidate), so the fork server is asked for none.
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

    def spawn(self, target: str, payload: dict[str, Any]) -> SpawnedCandidate:
        self.count += 1
        scratch = self.root / f"c{self.count}"
        scratch.mkdir(parents=True, exist_ok=True)
        payload = dict(payload, scratch=str(scratch))
        return SpawnedCandidate(self.server.spawn(target, payload, scratch), scratch)

    def close(self) -> None:
        try:
            self.server.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
