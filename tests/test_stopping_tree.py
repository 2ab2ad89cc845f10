"""Stopping a candidate by its PID namespace's process tree, where it has no control group
(ksearch.eval.isolation.pidtree, ksearch.eval.isolation.stopping).

The fork server's tests run with control groups turned off (ForkServer(cgroups=False)), as on the GPU hosts,
where no hierarchy is writable; they need a PID namespace per candidate (root) and skip without one. The
tree's own guards (a root the fork server no longer lists, a kept file whose thread has ended, a pid gone
before it is signalled) run anywhere, on the test's own child processes.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
import time

import pytest

from ksearch.eval.isolation import pidtree, stopping
from ksearch.eval.isolation.forkserver import ForkServer
from tests.test_stopping import progress, state, wait_for

_PR_SET_CHILD_SUBREAPER = 36


# ---- runs in the fork server's child ------------------------------------------------------------------------
def _pids_from(r: int, count: int) -> list[int]:
    data = b""
    while data.count(b"\n") < count:
        data += os.read(r, 256)
    return [int(p) for p in data.split()]


def a_deep_tree(conn, payload) -> None:
    """Four generations, the first forked by a thread other than the main one (so listed under that thread);
    each leaves its parent's session; the youngest spins, the others sleep."""
    r, w = os.pipe()

    def descend(depth: int) -> None:
        if os.fork() == 0:
            os.setsid()
            os.write(w, b"%d\n" % os.getpid())
            if depth > 1:
                descend(depth - 1)
                while True:
                    time.sleep(1)
            while True:
                pass

    threading.Thread(target=lambda: (descend(4), threading.Event().wait()), daemon=True).start()
    conn.send(_pids_from(r, 4))
    while True:
        conn.send(conn.recv())


def adopts(conn, payload) -> None:
    """A subreaper: its grandchild, orphaned, comes back to it (not to the namespace's init) and spins."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    r, w = os.pipe()
    if os.fork() == 0:
        if os.fork() == 0:
            os.setsid()
            os.write(w, b"%d\n" % os.getpid())
            while True:
                pass
        os._exit(0)
    os.wait()
    conn.send(_pids_from(r, 1))
    conn.recv()


# ---- a fork server without control groups ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def server():
    with ForkServer(interpret=True, cgroups=False) as s:
        if s.isolation != "namespaces":
            pytest.skip(f"no PID namespace per candidate here ({s.isolation_note}): the judge stops process groups")
        yield s


@pytest.fixture
def spawn(server, tmp_path):
    children = []

    def start(target: str):
        child = server.spawn(target, None, tmp_path / f"scratch{len(children)}")
        children.append(child)
        assert child.conn.poll(60), child.output()[0][-3000:]
        assert not child.groups and child.namespace is not None
        return child, child.conn.recv()

    yield start
    for child in children:
        child.kill()


def _ns_pid(pid: int) -> int:
    """`pid`'s number in its own PID namespace (the candidate reports those)."""
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("NSpid:")).split()[-1])


def _judges_view(child, ns_pids: list[int]) -> list[int]:
    """The judge's pids of the candidate's processes it named by their numbers in its namespace."""
    tree = pidtree.Tree(child.namespace, child.pid)
    found: dict[int, int] = {}
    assert wait_for(lambda: set(ns_pids) <= found.keys() or bool(found.update(
        {_ns_pid(pid): pid for pid in tree.members()}))), (ns_pids, found)
    tree.close()
    return [found[p] for p in ns_pids]


def _stopped(child) -> stopping.Stopped:
    tree = stopping.holder_for(child.groups, child.namespace, child.pid)
    assert isinstance(tree, pidtree.Tree)
    held = stopping.stop(tree)
    assert held.settle(1.0)
    assert child.namespace.init not in held.fds and state(child.namespace.init) != "T"
    return held


def test_without_control_groups_the_walls_say_the_tree_holds(server):
    assert "not asked for" in server.isolation_note
    assert "PID namespace's process tree" in server.isolation_note


def test_a_process_that_left_the_session_is_stopped_by_the_tree(spawn):
    child, started = spawn("tests.test_stopping:escapes_and_spins")
    assert started == "started"
    tree = stopping.holder_for((), child.namespace, child.pid)
    assert tree is not None and wait_for(lambda: len(tree.members()) == 2)
    [escaped] = tree.members() - {child.pid}
    assert os.getsid(escaped) != os.getsid(child.pid)
    held = _stopped(child)
    try:
        assert set(held.fds) == {child.pid, escaped}
        assert progress(escaped) == 0.0
    finally:
        held.resume()
    assert progress(escaped) > 0.05
    tree.close()


def test_a_deep_tree_made_by_a_thread_is_stopped_and_continued(spawn):
    child, ns_pids = spawn("tests.test_stopping_tree:a_deep_tree")
    pids = _judges_view(child, ns_pids)
    held = _stopped(child)
    try:
        assert set(pids) < set(held.fds)
        assert all(state(pid) == "T" for pid in pids)
        assert progress(pids[-1], 0.2) == 0.0
        child.conn.send("ping")
        assert not child.conn.poll(0.1)
    finally:
        held.resume()
    assert progress(pids[-1], 0.2) > 0.05
    assert child.conn.poll(5) and child.conn.recv() == "ping"


def test_a_subreapers_adopted_grandchild_is_stopped(spawn):
    child, ns_pids = spawn("tests.test_stopping_tree:adopts")
    [orphan] = _judges_view(child, ns_pids)
    assert wait_for(lambda: int(open(f"/proc/{orphan}/stat").read().rpartition(")")[2].split()[1]) == child.pid)
    held = _stopped(child)
    try:
        assert set(held.fds) == {child.pid, orphan}
        assert progress(orphan, 0.2) == 0.0
    finally:
        held.resume()
    assert progress(orphan, 0.2) > 0.05


def test_orphans_handed_to_the_init_are_stopped(spawn):
    """A chain of processes that each start their successor and exit: every one ends up the init's."""
    child, _ = spawn("tests.test_stopping:moves_on")
    time.sleep(0.1)
    tree = stopping.holder_for((), child.namespace, child.pid)
    assert tree is not None
    held = _stopped(child)
    try:
        listed = tree.members()             # the init never reaps: the ones that exited stay, as zombies
        assert all(state(pid) in "TZ" for pid in listed)
        assert len([pid for pid in listed if state(pid) == "T"]) >= 2      # one may be caught forking
        time.sleep(0.2)
        assert tree.members() == listed
    finally:
        held.resume()
    assert wait_for(lambda: tree.members() != listed)
    tree.close()


# ---- the tree's guards, on the test's own children -------------------------------------------------------------
@pytest.fixture
def family():
    """Two children of this process (a fake init and a fake candidate with two children of its own)."""
    sleep = shutil.which("sleep") or "/bin/sleep"
    init = subprocess.Popen([sleep, "60"])
    candidate = subprocess.Popen(["/bin/sh", "-c", f"{sleep} 60 & {sleep} 60 & wait"])
    yield init.pid, candidate.pid
    for p in (init, candidate):
        p.kill()
        p.wait()


@pytest.mark.skipif(not pidtree.available(os.getpid()), reason="no /proc/PID/task/TID/children here")
def test_the_tree_walks_only_from_roots_its_parent_still_lists(family):
    init, candidate = family
    assert threading.current_thread() is threading.main_thread()     # Popen forked from this thread
    tree = pidtree.Tree(pidtree.Namespace(init, os.getpid()), candidate)
    assert wait_for(lambda: len(tree.members()) == 3)
    assert candidate in tree.members() and init not in tree.members()
    tree.close()
    stranger = pidtree.Tree(pidtree.Namespace(init, init), candidate)     # as if the pid were someone else's now
    assert stranger.members() == set()
    stranger.close()


@pytest.mark.skipif(not pidtree.available(os.getpid()), reason="no /proc/PID/task/TID/children here")
def test_a_kept_file_of_an_ended_thread_is_opened_again(family):
    """A kept children file names the thread it was opened for: once that one has ended, reading it says
    nothing, and its tid may be another thread's. The walk checks and opens the file again by path."""
    init, candidate = family
    tree = pidtree.Tree(pidtree.Namespace(init, os.getpid()), candidate)
    assert wait_for(lambda: len(tree.members()) == 3)
    gone = subprocess.Popen([shutil.which("true") or "/bin/true"])
    stale = pidtree._Kept(os.open(f"/proc/{gone.pid}/task/{gone.pid}/children", os.O_RDONLY),
                          os.open(f"/proc/{gone.pid}/task/{gone.pid}/comm", os.O_RDONLY), checked=0.0)
    gone.wait()
    tree._close((candidate, candidate))
    tree._kept[(candidate, candidate)] = stale          # as if its tid had been another thread's before
    assert len(tree.members()) == 3
    assert tree._kept[(candidate, candidate)] is not stale
    tree.close()


@pytest.mark.skipif(not pidtree.available(os.getpid()), reason="no /proc/PID/task/TID/children here")
def test_past_the_descriptors_it_may_keep_the_tree_reads_by_path(family, monkeypatch):
    init, candidate = family
    before = pidtree.Tree.kept_all
    monkeypatch.setattr(pidtree, "KEEP_ALL", before + 1)
    tree = pidtree.Tree(pidtree.Namespace(init, os.getpid()), candidate)
    assert wait_for(lambda: len(tree.members()) == 3)
    assert len(tree._kept) == 1 and pidtree.Tree.kept_all == before + 1
    tree.close()
    assert pidtree.Tree.kept_all == before


class _Scripted:
    """A holder whose listings the test writes (no /proc)."""

    def __init__(self, *listings: set[int]):
        self.listings = iter(listings)

    def members(self) -> set[int]:
        return next(self.listings, set())

    def close(self) -> None:
        pass


def test_a_pid_the_next_walk_does_not_find_is_never_signalled():
    """Listed by one walk, gone from the next (its process ended, the pid may be an outsider's): the pidfd
    opened in between is never used."""
    outsider = subprocess.Popen([shutil.which("sleep") or "/bin/sleep", "60"])
    try:
        held = stopping.stop(_Scripted({outsider.pid}, set(), set()))
        assert held.fds == {}
        time.sleep(0.05)
        assert state(outsider.pid) != "T"
    finally:
        outsider.kill()
        outsider.wait()
