"""Fresh processes for candidates, as the judge needs them: `CandidateSpawner.spawn(target, payload)`.

Each child gets its own scratch folder (the only place it may write; a size-limited tmpfs of its own where
the kernel allows, see ksearch.eval.isolation.walls; removed when it ends), its own captured output and a connection
to the judge; `kill()` ends it and every process it started. The children come from the fork server
(ksearch.eval.isolation.forkserver), which has torch and triton imported already, so a fresh process per candidate
costs milliseconds rather than an interpreter start. The candidate's harness installs the audit hook
itself, after it has built the task (ksearch.eval.candidate.harness), so the fork server is asked for none.

The task: the worker pinned the evaluator's snapshot of the task's files (ksearch.task.snapshot); every
child gets the same snapshot, less the reference's source, and builds the task from it, and its mount
namespace covers the task's folder
(the whole tasks root where that hides nothing the candidate needs), so the candidate neither reads nor
changes what it is judged by.

The scratch folders live under one root the *parent* of the worker made (sandbox.WorkerProcess) and
removes when the worker ends, killed or not.

On a GPU, Triton builds a small C launcher helper with the host compiler the first time a process uses a
cache folder (seconds). The trusted worker builds it once into a seed folder, and each child gets a
private *copy* of that folder as its Triton cache: the build is not repeated, and no candidate can write
into a cache another candidate reads.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

from ksearch.eval.candidate.audit import REFUSED_EXIT
from ksearch.eval.isolation import stopping

SCRATCH_PREFIX = "ksearch_scratch_"


class SpawnedCandidate:
    """A forked child plus its scratch folder; the judge sees the fork server's Child interface."""

    def __init__(self, child: Any, scratch: Path):
        self._child, self.scratch = child, scratch
        self.conn = child.conn
        self.pid = getattr(child, "pid", None)
        self.groups: tuple[str, ...] = getattr(child, "groups", ())    # its control groups
        self.namespace = getattr(child, "namespace", None)              # its PID namespace (pidtree.Namespace)
        # What the judge stops it by (control group, else the namespace's tree); None: its process group.
        self.holder: stopping.Holder | None = stopping.holder_for(self.groups, self.namespace, self.pid)

    def kill(self) -> None:
        try:
            self._child.kill()
        finally:
            if self.holder is not None:
                self.holder.close()
            shutil.rmtree(self.scratch, ignore_errors=True)

    def exit_description(self) -> str:
        return self._child.exit_description()

    def output(self) -> tuple[str, int]:
        return self._child.output()

    def refusal(self, timeout: float = 2.0) -> str | None:
        """If the process ended because the sandbox refused something, what it refused (else None)."""
        if self._child.wait(timeout) is None:
            return None
        lines = self.audit_violations()
        return "; ".join(sorted(set(lines)))[:1200] if lines else None

    def audit_violations(self) -> list[str]:
        """The sandbox's refusals: the audit hook's lines, and a refusal the process died of even when the
        candidate had silenced its output (the hook's exit code, seccomp's SIGSYS)."""
        lines = list(self._child.audit_violations())
        code = self._child.wait(0)
        if code == REFUSED_EXIT and not lines:
            lines.append("ksearch-audit: refused an operation and ended the process (the refusal's own report "
                         "was silenced: the candidate had redirected or closed its output)")
        elif code == -signal.SIGSYS:
            lines.append("ksearch-audit: refused a system call the sandbox forbids (seccomp killed the process "
                         "with SIGSYS)")
        return lines


class CandidateSpawner:
    def __init__(self, *, interpret: bool, memory_limit_bytes: int | None = None, root: str | None = None,
                 cpus: tuple[int, ...] | None = None):
        from ksearch.eval.isolation.forkserver import ForkServer

        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
        self.root.mkdir(parents=True, exist_ok=True)
        # Others may pass through (not list): a candidate running as an unprivileged uid without a mount
        # namespace reaches its own scratch folder below this one (mkdtemp makes it 0700: on the H200 every
        # candidate then died creating its caches, "Permission denied").
        os.chmod(self.root, 0o711)
        self.server = ForkServer(preload=["ksearch.eval.candidate.harness"], interpret=interpret,
                                 memory_limit_bytes=memory_limit_bytes, cpus=cpus)
        self.count = 0
        self.seed_cache: Path | None = None
        self._hidden: dict[str, tuple[str, ...]] = {}

    def warm_triton_cache(self) -> None:
        """(GPU) Build Triton's launcher helpers once, in this trusted process, into the seed folder."""
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
        except Exception:       # noqa: BLE001 - no seed: each child builds its own helper, slower but correct
            self.seed_cache = None
        finally:
            if previous is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = previous

    def hidden_for(self, snap: Any) -> tuple[str, ...]:
        """The folders a child's mount namespace covers for this task: its tasks root (every task there), or
        only the task's own folder when the root also holds what the candidate needs (Python, ksearch)."""
        if snap is None:
            return ()
        if snap.origin not in self._hidden:
            from ksearch.eval.isolation.walls import needed_paths

            keep = list(needed_paths()) + [str(self.root.resolve())]

            def safe(folder: str) -> bool:
                return folder != os.sep and not any(k == folder or k.startswith(folder + os.sep) for k in keep)

            origin = str(Path(snap.origin).resolve())
            tasks_root = os.path.dirname(origin)
            self._hidden[snap.origin] = ((tasks_root,) if safe(tasks_root) else
                                         (origin,) if safe(origin) else ())
        return self._hidden[snap.origin]

    def spawn(self, target: str, payload: dict[str, Any]) -> SpawnedCandidate:
        from ksearch.task import snapshot

        self.count += 1
        scratch = self.root / f"c{self.count}"
        scratch.mkdir(parents=True, exist_ok=True)
        snap = snapshot.pinned_named(str(payload.get("task", "")))
        payload = dict(payload, scratch=str(scratch))
        tasks = [snap.for_candidate()] if snap is not None else None
        child = self.server.spawn(target, payload, scratch, tasks=tasks, hidden=self.hidden_for(snap),
                                  seeds={"triton": str(self.seed_cache)} if self.seed_cache is not None else None)
        return SpawnedCandidate(child, scratch)

    def close(self) -> None:
        try:
            self.server.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


OWNED_PREFIX = SCRATCH_PREFIX + "pid"


def new_scratch_root() -> Path:
    """A scratch root named after this process (ksearch_scratch_pid<PID>-<random>), so a later process can
    tell it is stale once this one is gone (mkdtemp's random part never holds a '-')."""
    return Path(tempfile.mkdtemp(prefix=f"{OWNED_PREFIX}{os.getpid()}-"))


def remove_stale_scratch_roots() -> int:
    """Remove scratch roots whose owner process is gone (a killed run's); returns how many."""
    from ksearch.eval.isolation.reaper import alive

    removed = 0
    tmp = Path(tempfile.gettempdir())
    try:
        entries = list(tmp.iterdir())
    except OSError:
        return 0
    for p in entries:
        if not p.name.startswith(OWNED_PREFIX) or "-" not in p.name:
            continue
        owner = p.name[len(OWNED_PREFIX):].split("-", 1)[0]
        if not owner.isdigit() or not p.is_dir() or p.is_symlink():
            continue
        try:
            if p.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        if not alive(int(owner)):
            shutil.rmtree(p, ignore_errors=True)
            removed += 1
    return removed
