"""No process outlives its evaluation: setsid daemons and double forks die with the candidate, both with
PID namespaces and with the subreaper fallback; a candidate in namespaces has no network."""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest

from ksearch.eval.isolation import reaper
from ksearch.eval.isolation.forkserver import ForkServer
from ksearch.eval.parent.worker_handle import wait_for


# ---- runs in the child ------------------------------------------------------------------------------------
def _global_pid() -> int:
    return int(os.readlink("/proc/self"))


def spawn_daemons(conn, payload: dict) -> None:
    """Target: start a setsid daemon and a double-forked daemon, report their pids once the double fork's
    middle process has been reaped (its orphan re-parented: the process tree no longer changes), then end or
    hang."""
    r, w = os.pipe()
    if os.fork() == 0:                          # setsid + sleep
        os.setsid()
        os.write(w, b"%d\n" % _global_pid())
        time.sleep(600)
        os._exit(0)
    middle = os.fork()
    if middle == 0:                             # classic daemon: fork, setsid, fork, parent exits
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.write(w, b"%d\n" % _global_pid())
            time.sleep(600)
        os._exit(0)
    lines = b""
    while lines.count(b"\n") < 2:              # the two writes may arrive in one read
        lines += os.read(r, 64)
    os.waitpid(middle, 0)
    conn.send([_global_pid(), *(int(p) for p in lines.split())])
    if payload["hang"]:
        time.sleep(600)
    conn.recv()                                 # ends only once the test has seen it alive (no race)


def try_network(conn, port: int) -> None:
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.close()
        conn.send("connected")
    except OSError as e:
        conn.send(f"refused: {e}")


def list_proc(conn, payload) -> None:
    conn.send((sorted(int(p) for p in os.listdir("/proc") if p.isdigit()), os.readlink("/proc/self")))


# ---- runs in pytest ---------------------------------------------------------------------------------------
def _gone(pid: int) -> bool:
    return not reaper.alive(pid)


def _isolations() -> list[str]:
    ok, _ = reaper.namespaces_available()
    return ["namespaces", "subreaper"] if ok else ["subreaper"]


@pytest.fixture(scope="module", params=_isolations())
def server(request):
    with ForkServer(interpret=True, isolation=request.param) as s:
        assert s.isolation == request.param
        yield s


@pytest.mark.parametrize("hang", [False, True], ids=["ends", "killed"])
def test_setsid_and_double_fork_do_not_survive(server, tmp_path, hang):
    child = server.spawn("tests.test_reaper:spawn_daemons", {"hang": hang}, tmp_path)
    assert child.conn.poll(60), child.output()[0]
    reported = child.conn.recv()          # pids as the child sees them (its namespace's, with a private /proc)

    # seen from here: everything under the zygote (the namespace's init, the child, both daemons). The report
    # comes after the double fork's middle process was reaped, so no process of the tree is exiting or being
    # re-parented while it is walked.
    tree = [p for p in reaper.descendants(server.zygote_pid) if reaper.alive(p)]
    assert len(reported) == 3 and len(tree) >= 3, (reported, tree)
    if hang:
        assert child.wait(0.5) is None
        child.kill()
    else:
        child.conn.send("end")
        assert child.wait(30) is not None
    # the exit is reported only once everything is gone: no waiting needed
    assert [p for p in tree if reaper.alive(p)] == []
    assert [p for p in reaper.descendants(server.zygote_pid) if reaper.alive(p)] == []
    assert child.returncode == (-signal.SIGKILL if hang else 0)


def test_close_kills_every_child_and_the_zygote(tmp_path):
    s = ForkServer(interpret=True, isolation=_isolations()[0])
    children = [s.spawn("tests.test_reaper:spawn_daemons", {"hang": True}, tmp_path / str(i)) for i in range(2)]
    for c in children:
        assert c.conn.poll(60)
    zygote = s.zygote_pid
    pids = reaper.descendants(zygote)
    assert len(pids) >= 6
    s.close()
    assert wait_for(lambda: all(_gone(p) for p in pids + [zygote]), 5)
    assert all(c.returncode is not None for c in children)


def test_namespaced_candidate_has_no_network(tmp_path):
    if "namespaces" not in _isolations():
        pytest.skip("namespaces are not permitted here")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    try:
        with ForkServer(interpret=True, isolation="namespaces") as s:
            child = s.spawn("tests.test_reaper:try_network", port, tmp_path)
            assert child.conn.poll(60)
            answer = child.conn.recv()
        with ForkServer(interpret=True, isolation="subreaper", walls=False) as s:   # the control: host network
            child = s.spawn("tests.test_reaper:try_network", port, tmp_path)
            assert child.conn.poll(60)
            control = child.conn.recv()
    finally:
        listener.close()
    # the empty network namespace (unreachable), or first the walls' seccomp filter (no AF_INET socket at all)
    assert answer.startswith("refused") and ("unreachable" in answer or "Permission denied" in answer), answer
    assert control == "connected"


def test_namespaced_candidate_sees_only_its_namespace_in_proc(tmp_path):
    if "namespaces" not in _isolations() or not reaper.private_proc_available():
        pytest.skip("a private /proc is not permitted here")
    with ForkServer(interpret=True, isolation="namespaces") as s:
        assert "private /proc" in s.isolation_note
        child = s.spawn("tests.test_reaper:list_proc", None, tmp_path)
        assert child.conn.poll(60), child.output()[0]
        pids, me = child.conn.recv()
    assert pids == [1, 2] and me == "2"           # its init and itself: the judge cannot be named


def test_kill_tree_and_sweep_helpers():
    # a plain process tree outside any fork server: kill_tree takes the daemon child too
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            os.setsid()
            time.sleep(600)
        time.sleep(600)
        os._exit(0)
    assert wait_for(lambda: len(reaper.descendants(pid)) == 1, 5)
    grandchild = reaper.descendants(pid)[0]
    reaper.kill_tree(pid)
    os.waitpid(pid, 0)
    assert wait_for(lambda: _gone(grandchild), 5)


def capabilities(conn, payload) -> None:
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    conn.send((status["CapEff"].strip(), status["CapBnd"].strip(), status["NoNewPrivs"].strip()))
    try:
        reaper.unshare(reaper.CLONE_NEWNET)       # the walls' seccomp filter kills the process here
        unshare = "allowed"
    except OSError as e:
        unshare = e.strerror
    conn.send(unshare)


def test_children_give_up_capabilities(server, tmp_path):
    child = server.spawn("tests.test_reaper:capabilities", None, tmp_path)
    assert child.conn.poll(60), child.output()[0]
    eff, bnd, nnp = child.conn.recv()
    assert int(eff, 16) == 0 and int(bnd, 16) == 0 and nnp == "1", (eff, bnd, nnp)
    if server.walls_plan is not None and server.walls_plan.seccomp:
        assert child.wait(30) == -signal.SIGSYS, child.exit_description()
    else:
        assert child.conn.poll(60)
        assert "not permitted" in child.conn.recv()
