"""Scratch folders never outlive their worker: the worker's parent owns and removes their root, a later
process removes a killed run's, and `ksearch eval` leaves nothing in the temporary folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ksearch.eval.isolation.spawn import OWNED_PREFIX, new_scratch_root, remove_stale_scratch_roots
from ksearch.eval.parent.worker_handle import WorkerProcess

ROOT = Path(__file__).resolve().parents[1]


def test_a_killed_worker_leaves_no_scratch_root():
    worker = WorkerProcess(interpret=True)
    try:
        worker.wait_ready(180)
        root = worker.scratch_root
        assert root.is_dir() and root.name.startswith(f"{OWNED_PREFIX}{os.getpid()}-")
        (root / "c1").mkdir()
        (root / "c1" / "big.bin").write_bytes(b"x" * 4096)
        os.kill(worker.pid, signal.SIGKILL)          # as the evaluator's timeout does
    finally:
        worker.kill()
    assert not root.exists()


def test_roots_of_dead_owners_are_removed_and_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    mine = new_scratch_root()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{OWNED_PREFIX}{dead.pid}-abc123"
    (stale / "c1").mkdir(parents=True)
    other = tmp_path / "ksearch_scratch_4_kgn66r"          # not ours to judge: no owner in its name
    other.mkdir()
    assert remove_stale_scratch_roots() == 1
    assert not stale.exists() and mine.exists() and other.exists()


def test_ksearch_eval_leaves_nothing_in_the_temporary_folder(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    solution = tmp_path / "good.py"
    from tests.adversarial.kernels import GOOD, TASK

    solution.write_text(GOOD)
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "ksearch", "eval", str(solution), f"task={TASK}",
                           "eval.workloads=tiny", "eval.trials=1", "eval.check_trials=1"],
                          env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "PASSED" in done.stdout
    assert sorted(p.name for p in tmp.iterdir()) == []
