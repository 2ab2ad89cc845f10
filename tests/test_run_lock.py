"""One writer per run directory: a second `run`/`resume` is refused naming the holder and writes nothing;
`show` tells a live run from a dead one through the lock; a writer killed by SIGKILL leaves no stale lock."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ksearch.cli.app import ConfigError, compose_config, execute
from ksearch.store import read_records
from ksearch.store import records as R
from ksearch.store.lock import LOCK_NAME, RunLock, RunLocked, probe
from tests.fakes import journal_lines

CLI = [sys.executable, "-m", "ksearch.cli.main"]
ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
    [str(ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))}


def _snapshot(path: Path) -> dict[str, tuple]:
    """Every file under `path` with its bytes, inode and mtime: any write shows up as a difference."""
    out = {}
    for p in sorted(path.rglob("*")):
        st = p.stat()
        out[str(p.relative_to(path))] = (p.read_bytes() if p.is_file() else None, st.st_ino, st.st_mtime_ns)
    return out


@pytest.fixture
def holder(tmp_path):
    """A separate process that holds the lock of tmp_path/run until killed."""
    run = tmp_path / "run"
    run.mkdir()
    code = textwrap.dedent(f"""
        import sys, time
        from ksearch.store.lock import RunLock
        with RunLock({str(run)!r}, command="ksearch resume holder-test"):
            print("held", flush=True)
            time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], env=ENV, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    yield run, proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_a_second_writer_is_refused_with_the_holders_pid_and_changes_nothing(holder):
    run, proc = holder
    before = _snapshot(run)
    with pytest.raises(RunLocked) as e:
        RunLock(run).acquire()
    assert f"pid {proc.pid}" in str(e.value) and "ksearch resume holder-test" in str(e.value)
    assert "\n" not in str(e.value)
    assert _snapshot(run) == before
    state = probe(run)
    assert state.live and state.holder.pid == proc.pid
    assert _snapshot(run) == before                 # probing wrote nothing either


def test_sigkill_releases_the_lock_and_the_file_names_the_last_writer(holder):
    run, proc = holder
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    state = probe(run)
    assert not state.live and state.holder.pid == proc.pid
    with RunLock(run, command="ksearch resume again") as lock:     # the stale lock file does not block
        assert lock.held and probe(run).live and probe(run).holder.pid == os.getpid()
    assert not probe(run).live


def test_a_child_forked_by_the_writer_does_not_keep_a_dead_run_live(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    code = textwrap.dedent(f"""
        import os, time
        from ksearch.store.lock import RunLock
        lock = RunLock({str(run)!r}).acquire()
        child = os.fork()
        if child == 0:
            time.sleep(600)
            os._exit(0)
        print(child, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], env=ENV, stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    try:
        assert probe(run).live
        proc.kill()
        proc.wait()
        assert Path(f"/proc/{child}").exists()           # the child lives on ...
        assert not probe(run).live                       # ... without holding the dead writer's lock
    finally:
        os.kill(child, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def test_a_reader_never_sees_the_lock_file_without_a_holder(tmp_path):
    import threading

    RunLock(tmp_path, command="first").acquire().release()
    stop = threading.Event()

    def claim_again_and_again():
        i = 0
        while not stop.is_set():
            try:
                RunLock(tmp_path, command="x" * (i % 50)).acquire().release()    # identities of varying length
            except RunLocked:
                pass
            i += 1

    t = threading.Thread(target=claim_again_and_again)
    t.start()
    try:
        seen = [probe(tmp_path).holder.command for _ in range(3000)]
    finally:
        stop.set()
        t.join()
    assert len(set(seen)) > 1


def test_probe_of_a_folder_without_a_lock_file_is_not_live_and_creates_nothing(tmp_path):
    state = probe(tmp_path)
    assert not state.live and state.holder is None
    assert list(tmp_path.iterdir()) == []
    assert not probe(tmp_path / "missing").live


def test_execute_refuses_a_locked_run_before_writing_anything(holder, tmp_path):
    run, proc = holder
    # a finished run in the folder, as if the holder were resuming it
    cfg = compose_config([f"run.dir={tmp_path / 'src'}", "run.live=false", "search.max_rounds=1"])
    src = tmp_path / "src"
    execute(cfg, src, fresh=True)
    for name in ("config.yaml", "journal.jsonl"):
        (run / name).write_bytes((src / name).read_bytes())
    before = _snapshot(run)
    resume = compose_config([f"run.dir={run}", "run.live=false", "search.max_rounds=2"])
    with pytest.raises(RunLocked, match=f"pid {proc.pid}"):
        execute(resume, run, fresh=False)
    with pytest.raises(RunLocked):                   # a fresh run pointed at it: the lock is checked first
        execute(resume, run, fresh=True)
    assert _snapshot(run) == before


def test_a_fresh_run_that_fails_before_writing_leaves_no_folder(tmp_path):
    run = tmp_path / "new"
    cfg = compose_config([f"run.dir={run}", f"fork.from={tmp_path / 'nowhere'}", "fork.node=root"])
    with pytest.raises(ConfigError):
        execute(cfg, run, fresh=True)
    assert not run.exists()


def test_a_fresh_run_over_an_old_run_is_refused_without_touching_it(tmp_path):
    run = tmp_path / "old"
    cfg = compose_config([f"run.dir={run}", "run.live=false", "search.max_rounds=1"])
    execute(cfg, run, fresh=True)
    before = _snapshot(run)
    with pytest.raises(FileExistsError, match="already holds a run"):
        execute(cfg, run, fresh=True)
    assert _snapshot(run) == before


# ---- the CLI, end to end --------------------------------------------------------------------------------
def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), env=ENV, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_run_resume_and_show_on_one_run_directory(tmp_path):
    run = tmp_path / "r"
    rounds = "search.max_rounds=2"
    first = subprocess.Popen(CLI + ["run", f"run.dir={run}", rounds, "run.live=false"], env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        _wait(lambda: journal_lines(run) >= 2 or first.poll() is not None, 300, "the run to write its journal")
        assert first.poll() is None, first.stderr.read().decode()[-2000:]
        config = _snapshot(run)["config.yaml"]

        shown = _cli("show", str(run))
        assert shown.returncode == 0 and f"running (pid {first.pid}" in shown.stdout, shown.stdout[-2000:]

        refused = _cli("resume", str(run))           # a second writer while the run is alive
        out = " ".join(refused.stderr.split())       # refusals go to stderr
        assert refused.returncode == 2 and f"pid {first.pid}" in out and "Traceback" not in refused.stderr, out
        assert _snapshot(run)["config.yaml"] == config   # not even the config was rewritten

        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()

    shown = _cli("show", str(run))
    text = " ".join(shown.stdout.split())
    assert shown.returncode == 0 and "stopped without finishing" in text and f"last writer pid {first.pid}" in text
    assert f"ksearch resume {run}" in text
    t0 = time.time()
    live = _cli("show", str(run), "--live", timeout=120)     # a dead run does not make --live wait
    assert live.returncode == 0 and f"not running (last writer pid {first.pid} ended)" in live.stdout
    assert time.time() - t0 < 60

    second = subprocess.Popen(CLI + ["resume", str(run)], env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, start_new_session=True)
    try:
        def second_holds_it():
            state = probe(run)
            return state.live and state.holder is not None and state.holder.pid == second.pid

        _wait(lambda: second_holds_it() or second.poll() is not None, 120, "the resume to take the lock")
        assert second.poll() is None, second.stderr.read().decode()[-2000:]
        third = _cli("resume", str(run))              # two resumes at once
        out = " ".join(third.stderr.split())
        assert third.returncode == 2 and f"pid {second.pid}" in out, out
        _, err = second.communicate(timeout=600)
        assert second.returncode == 0, err.decode()[-2000:]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait()

    recs = read_records(run / "journal.jsonl")[0]
    assert [r.seq for r in recs] == list(range(len(recs)))        # one writer at a time: no interleaving
    keys = [r.key for r in R.of_kind(recs, R.Evaluation)]
    assert len(keys) == len(set(keys)) and len(R.of_kind(recs, R.RunStart)) == 1
    assert isinstance(recs[-2], R.RunEnd)
    shown = _cli("show", str(run))
    assert "finished: round budget used" in " ".join(shown.stdout.split())
    assert json.loads((run / LOCK_NAME).read_text())["pid"] == second.pid


# ---- show's status line ---------------------------------------------------------------------------------
def test_show_says_why_a_run_stopped_without_finishing(tmp_path):
    from ksearch.llm.base import ModelError
    from ksearch.store import load_history
    from ksearch.viz.tree_view import run_summary
    from tests.fakes import FlakyModel
    from tests.test_resume_fork import _run, _search

    failed = tmp_path / "f"
    s, _, j = _search(failed, model=FlakyModel(2), search={"max_rounds": 3})
    with pytest.raises(ModelError):
        s.run()
    j.close()
    h = load_history(failed)
    text = " ".join(run_summary(h).plain.split())
    assert h.state == "stopped" and "stopped without finishing (a model request failed: provider gave up" in text
    assert f"`ksearch resume {failed}` continues it" in text

    extended = tmp_path / "e"
    _run(extended, search={"max_rounds": 2})
    assert load_history(extended).state == "finished"
    with RunLock(extended):
        assert load_history(extended).state == "running"      # e.g. resumed with a larger budget
        with (extended / "journal.jsonl").open("a") as f:      # ... which went on past its old end
            f.write(json.dumps(R.ConfigChange(seq=99, t=time.time()).to_json()) + "\n")
    h = load_history(extended)
    assert not h.ended and h.state == "stopped" and "killed or crashed" in run_summary(h).plain
