"""A run stopped by SIGTERM or by a full disk ends with one line (what happened, the journal is intact, how to
resume), no traceback, and `ksearch resume` then finishes it."""

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ksearch.cli.main import main
from ksearch.store import Journal, read_records
from ksearch.store import records as R
from ksearch.store.shutdown import EXIT_DISK_FULL, EXIT_TERMINATED, terminated_message
from tests.fakes import journal_lines

CLI = [sys.executable, "-m", "ksearch.cli.main"]
ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
    [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _assert_whole_and_sequential(run: Path) -> list[R.Record]:
    data = (run / "journal.jsonl").read_bytes()
    assert data.endswith(b"\n")
    recs, good = read_records(run / "journal.jsonl")
    assert good == len(data) and [r.seq for r in recs] == list(range(len(recs)))
    return recs


def _ends_finished(recs: list[R.Record]) -> bool:
    return isinstance(recs[-2], R.RunEnd) and isinstance(recs[-1], R.TreeSnapshot)


def _descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = {int(c) for c in (task / "children").read_text().split()}
            except OSError:
                continue
            todo += list(kids - out)
            out |= kids
    return out


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# ---- the journal under a full disk ----------------------------------------------------------------------
def test_a_write_cut_short_by_a_full_disk_leaves_only_whole_lines(tmp_path, monkeypatch):
    path = tmp_path / "journal.jsonl"
    j = Journal(path, fsync=False)
    for i in range(3):
        j.append(R.TreeSnapshot(round=i, tree={"i": i}))
    before = path.read_bytes()
    real_write, calls = os.write, []

    def short_then_full(fd, data):
        if fd != j._fd:
            return real_write(fd, data)
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))     # the disk took half the line ...
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))       # ... and then nothing

    monkeypatch.setattr(os, "write", short_then_full)
    with pytest.raises(OSError) as e:
        j.append(R.TreeSnapshot(round=3, tree={"big": "x" * 10000}))
    monkeypatch.undo()
    j.close()
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(path) and len(calls) == 2
    assert path.read_bytes() == before                     # the half line was cut off again
    again = Journal(path, fsync=False)
    assert again.dropped_bytes == 0 and len(again.recorded) == 3
    again.close()


def test_a_full_disk_in_a_run_ends_with_one_line_and_resume_finishes(tmp_path, monkeypatch, capsys):
    """In-process, the disk fills after a few records (a full disk for real is the tmpfs test below)."""
    run = tmp_path / "r"
    real_write = Journal._write

    def fills_up(self, record):
        # the record after a fresh run's first tree snapshot does not fit (the show below then has a tree)
        if not self.recorded and getattr(self, "_tree_written", False):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
        self._tree_written = isinstance(record, R.TreeSnapshot)
        return real_write(self, record)

    monkeypatch.setattr(Journal, "_write", fills_up)
    rc = main(["run", f"run.dir={run}", "search.max_rounds=1", "run.live=false"])
    out, err = capsys.readouterr()
    assert rc == EXIT_DISK_FULL, out[-2000:]
    assert _lines(err) == [_lines(err)[0]] and "disk is full" in err and f"ksearch resume {run}" in err
    assert "intact" in err and "Traceback" not in out + err
    assert isinstance(_assert_whole_and_sequential(run)[-1], R.TreeSnapshot)
    monkeypatch.undo()
    assert main(["show", str(run)]) == 0
    assert "stopped without finishing" in " ".join(capsys.readouterr().out.split())
    assert main(["resume", str(run)]) == 0
    assert _ends_finished(_assert_whole_and_sequential(run))


@pytest.fixture
def small_disk(tmp_path):
    """A 40 KiB tmpfs: a run fills it within its first round. Needs root (mount); skipped otherwise."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no `mount` command here, so no small filesystem to fill; the in-process test covers it")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({made.stderr.strip() or 'not root'}); "
                    f"the in-process disk-full test covers the same path")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.slow
def test_a_really_full_disk_ends_with_one_line_and_resume_finishes_after_space_is_freed(small_disk):
    run = small_disk / "run"
    done = subprocess.run(CLI + ["run", f"run.dir={run}", "search.max_rounds=2", "run.live=false"], env=ENV,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == EXIT_DISK_FULL, (done.stdout[-2000:], done.stderr[-2000:])
    assert len(_lines(done.stderr)) == 1 and "disk is full" in done.stderr and f"ksearch resume {run}" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    _assert_whole_and_sequential(run)
    shown = subprocess.run(CLI + ["show", str(run)], env=ENV, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0 and "stopped without finishing" in " ".join(shown.stdout.split())
    assert not list(run.rglob("*.tmp"))                 # no half-written snapshot left behind
    subprocess.run(["mount", "-o", "remount,size=8m", str(small_disk)], check=True)
    resumed = subprocess.run(CLI + ["resume", str(run)], env=ENV, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert _ends_finished(_assert_whole_and_sequential(run))


# ---- SIGTERM --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_sigterm_ends_a_run_with_one_line_kills_its_workers_and_resume_finishes(tmp_path):
    run = tmp_path / "r"
    proc = subprocess.Popen(CLI + ["run", f"run.dir={run}", "search.max_rounds=2", "run.live=false"], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 300
        workers: set[int] = set()
        while proc.poll() is None and time.time() < deadline and not (workers and journal_lines(run) >= 3):
            workers |= _descendants(proc.pid)          # the evaluator's workers, once it has started them
            time.sleep(0.05)
        assert proc.poll() is None and workers, "the run ended before it could be stopped"
        proc.send_signal(signal.SIGTERM)               # the process only, as `kill PID` does
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == EXIT_TERMINATED, (out[-2000:], err[-2000:])
    assert _lines(err) == [terminated_message(run)] and "Traceback" not in out + err
    deadline = time.time() + 10
    while not all(_gone(w) for w in workers) and time.time() < deadline:
        time.sleep(0.1)
    assert all(_gone(w) for w in workers), "an evaluator worker outlived the stopped run"
    _assert_whole_and_sequential(run)
    assert json.loads((run / ".lock").read_text())["pid"] == proc.pid
    resumed = subprocess.run(CLI + ["resume", str(run)], env=ENV, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert _ends_finished(_assert_whole_and_sequential(run))


@pytest.mark.slow
def test_sigterm_ends_a_sweep_with_one_line_and_marks_the_arm_interrupted(tmp_path):
    from ksearch.store.lock import probe

    root = tmp_path / "sweep"
    proc = subprocess.Popen(CLI + ["run", "-m", f"run.dir={root}", "run.seed=0,1", "search.max_rounds=1",
                                   "run.live=false"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.time() + 300
        while proc.poll() is None and time.time() < deadline and journal_lines(root / "0_seed-0") < 3:
            time.sleep(0.05)
        assert proc.poll() is None, "the sweep ended before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == EXIT_TERMINATED and "Traceback" not in out + err
    assert len(_lines(err)) == 1 and "stopped by SIGTERM" in err and "ksearch resume" in err
    assert f"ksearch resume {root / '0_seed-0'}" in " ".join(out.split())     # the arm to resume, by name
    arms = json.loads((root / "sweep.json").read_text())["arms"]
    assert [a["status"] for a in arms] == ["interrupted", "pending"]
    assert not probe(root / "0_seed-0").live
