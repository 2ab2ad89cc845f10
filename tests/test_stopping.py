"""Stopping a candidate by its control group (ksearch.eval.isolation.stopping).

The first test needs a fork server that gives its children control groups (root, a writable hierarchy); it
skips with the fork server's reason elsewhere. The others read a cgroup.procs file the test writes itself, so
they run anywhere: they check the loop's guards (a pid that left the group between two reads, a process
continued by another, one that appeared after the stop, no pidfd) on the test's own child processes.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time

import pytest

from ksearch.eval.isolation import stopping
from ksearch.eval.isolation.forkserver import ForkServer


# ---- runs in the fork server's child ------------------------------------------------------------------------
def escapes_and_spins(conn, payload) -> None:
    """Start a process that leaves this one's session and process group and spins; then answer pings."""
    ready_r, ready_w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        os.write(ready_w, b"x")
        while True:
            pass
    os.read(ready_r, 1)
    conn.send("started")
    while True:
        conn.send(conn.recv())


def moves_on(conn, payload) -> None:
    """Start a process that never stays: every 2 ms it starts its successor and exits (this one stays: the
    namespace ends with it)."""
    if os.fork() == 0:
        while True:
            time.sleep(0.002)
            if os.fork() != 0:
                os._exit(0)
    conn.send("started")
    conn.recv()


# ---- helpers ----------------------------------------------------------------------------------------------
def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()


def state(pid: int) -> str:
    return _stat(pid)[0]


def cpu_seconds(pid: int) -> float:
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def progress(pid: int, seconds: float = 0.3) -> float:
    """CPU seconds `pid` used over `seconds`."""
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return cpu_seconds(pid) - before


def wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# ---- a real control group -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server():
    with ForkServer(interpret=True) as s:
        if s.walls_plan is None or not s.walls_plan.cgroups:
            pytest.skip("the fork server makes no control groups here: "
                        + (s.walls_plan.describe() if s.walls_plan is not None else "no walls"))
        yield s


def test_a_process_that_left_the_process_group_is_stopped_and_continued(server, tmp_path):
    child = server.spawn("tests.test_stopping:escapes_and_spins", None, tmp_path / "scratch")
    assert child.conn.poll(60) and child.conn.recv() == "started", child.output()[0][-3000:]
    assert child.groups
    try:
        assert wait_for(lambda: len(stopping._procs(child.groups[0])) == 2)
        [escaped] = stopping._procs(child.groups[0]) - {child.pid}
        assert os.getpgid(escaped) != os.getpgid(child.pid) and os.getsid(escaped) != os.getsid(child.pid)

        held = stopping.stop(stopping.ControlGroup(child.groups[0]))
        try:
            assert held.settle(1.0)
            assert set(held.fds) == {child.pid, escaped}
            assert (state(child.pid), state(escaped)) == ("T", "T")
            assert progress(escaped) == 0.0
            child.conn.send("ping")
            assert not child.conn.poll(0.1)
        finally:
            held.resume()
        assert held.fds == {}
        assert wait_for(lambda: state(escaped) == "R" and state(child.pid) != "T")
        assert progress(escaped) > 0
        assert child.conn.poll(5) and child.conn.recv() == "ping"
    finally:
        child.kill()


def test_a_process_that_keeps_moving_to_new_pids_is_caught(server, tmp_path):
    """The loop reads the group again until nothing new appears, and settle waits until the signals have
    landed: a chain of processes, each starting the next and exiting, stops for good."""
    child = server.spawn("tests.test_stopping:moves_on", None, tmp_path / "scratch")
    assert child.conn.poll(60) and child.conn.recv() == "started", child.output()[0][-3000:]
    try:
        time.sleep(0.1)
        held = stopping.stop(stopping.ControlGroup(child.groups[0]))
        try:
            assert held.settle(1.0)
            listed = stopping._procs(child.groups[0])
            assert listed and all(state(pid) in "TZ" for pid in listed)
            time.sleep(0.2)
            assert stopping._procs(child.groups[0]) == listed
        finally:
            held.resume()
        assert wait_for(lambda: stopping._procs(child.groups[0]) != listed)
    finally:
        child.kill()


# ---- the loop's guards, on a cgroup.procs file the test writes --------------------------------------------
@pytest.fixture
def sleepers():
    procs: list[subprocess.Popen] = []

    def start() -> int:
        procs.append(subprocess.Popen([shutil.which("sleep") or "/bin/sleep", "60"]))
        return procs[-1].pid

    yield start
    for p in procs:
        p.kill()
        p.wait()


def listing(folder, *pids: int) -> str:
    (folder / "cgroup.procs").write_text("".join(f"{p}\n" for p in pids))
    return str(folder)


def test_a_pid_gone_from_the_group_before_it_is_signalled_is_left_alone(tmp_path, sleepers, monkeypatch):
    """The pid was listed, then was not any more when its pidfd was open (its process ended and the pid went
    to a process outside the group): never signalled."""
    outsider = sleepers()
    group = listing(tmp_path, outsider)
    reads = iter([{outsider}, set(), set()])
    monkeypatch.setattr(stopping, "_procs", lambda g: next(reads, set()))
    held = stopping.stop(stopping.ControlGroup(group))
    assert held.fds == {}
    time.sleep(0.05)
    assert state(outsider) != "T"


def test_settle_stops_a_late_process_and_one_that_was_continued(tmp_path, sleepers):
    first, late = sleepers(), sleepers()
    group = listing(tmp_path, first)
    held = stopping.stop(stopping.ControlGroup(group))
    try:
        assert held.settle(1.0) and state(first) == "T"
        listing(tmp_path, first, late)            # appeared after the stop (a fork in progress)
        os.kill(first, 18)                        # SIGCONT from a process of the group not stopped yet
        assert held.settle(1.0)
        assert (state(first), state(late)) == ("T", "T")
    finally:
        held.resume()
    assert wait_for(lambda: state(first) != "T" and state(late) != "T")


def test_resume_continues_exactly_what_was_stopped(tmp_path, sleepers):
    ours, stopped_before = sleepers(), sleepers()
    group = listing(tmp_path, ours)
    held = stopping.stop(stopping.ControlGroup(group))
    assert wait_for(lambda: state(ours) == "T")
    os.kill(stopped_before, 19)                     # SIGSTOP by someone else, listed only afterwards
    listing(tmp_path, ours, stopped_before)
    held.resume()
    assert wait_for(lambda: state(ours) != "T")
    time.sleep(0.05)
    assert state(stopped_before) == "T"
    os.kill(stopped_before, 18)


def test_without_a_pidfd_the_pid_is_signalled_once_confirmed(tmp_path, sleepers, monkeypatch):
    pid = sleepers()

    def no_descriptors(pid: int) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(os, "pidfd_open", no_descriptors)
    held = stopping.stop(stopping.ControlGroup(listing(tmp_path, pid)))
    assert held.fds == {pid: -1}
    assert held.settle(1.0) and state(pid) == "T"
    held.resume()
    assert wait_for(lambda: state(pid) != "T")


def test_past_the_pidfds_it_keeps_a_process_is_continued_by_pid(tmp_path, sleepers, monkeypatch):
    monkeypatch.setattr(stopping, "KEEP", 2)
    pids = [sleepers() for _ in range(4)]
    held = stopping.stop(stopping.ControlGroup(listing(tmp_path, *pids)))
    assert held.kept == 2 and sorted(fd >= 0 for fd in held.fds.values()) == [False, False, True, True]
    assert held.settle(1.0) and all(state(pid) == "T" for pid in pids)
    held.resume()
    assert wait_for(lambda: all(state(pid) != "T" for pid in pids))


def test_a_group_that_is_gone_stops_nothing(tmp_path):
    held = stopping.stop(stopping.ControlGroup(str(tmp_path / "removed")))
    assert held.fds == {} and held.settle(0.1)
    held.resume()
