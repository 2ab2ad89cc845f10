"""No process outlives its evaluation: setsid daemons and double forks die with the candidate, both with
PID namespaces and with the subreaper fallback; a candidate in namespaces has no network."""

from __future__ import annotations

import os
import signal
import socket
import time

import pytest

from ksearch.eval import reaper
from ksearch.eval.forkserver import ForkServer
from ksearch.eval.sandbox import wait_for


# ---- runs in the child ------------------------------------------------------------------------------------
def _global_pid() -> int:
    return int(os.readlink("/proc/self"))       # the host's /proc: the pid the test can check


def spawn_daemons(conn, payload: dict) -> None:
    """Target: start a setsid daemon and a double-forked daemon, report their pids, then end or hang."""
    r, w = os.pipe()
    if os.fork() == 0:                          # setsid + sleep
        os.setsid()
        os.write(w, b"%d\n" % _global_pid())
        time.sleep(600)
        os._exit(0)
    if os.fork() == 0:                          # classic daemon: fork, setsid, fork, parent exits
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            os.write(w, b"%d\n" % _global_pid())
            time.sleep(600)
        os._exit(0)
    pids = [int(os.read(r, 64).split()[0]) for _ in range(2)]
    conn.send([_global_pid(), *pids])
    if payload["hang"]:
        time.sleep(600)


def try_network(conn, port: int) -> None:
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.close()
        conn.send("connected")
    except OSError as e:
        conn.send(f"refused: {e}")


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
    pids = child.conn.recv()
    assert len(pids) == 3 and all(reaper.alive(p) for p in pids[1:])
    if hang:
        assert child.wait(0.5) is None
        child.kill()
    else:
        assert child.wait(30) is not None
    # the exit is reported only once everything is gone: no waiting needed
    assert all(_gone(p) for p in pids), [(p, reaper.alive(p)) for p in pids]
    assert child.returncode == (-signal.SIGKILL if hang else 0)


def test_close_kills_every_child_and_the_zygote(tmp_path):
    s = ForkServer(interpret=True, isolation=_isolations()[0])
    children = [s.spawn("tests.test_reaper:spawn_daemons", {"hang": True}, tmp_path / str(i)) for i in range(2)]
    pids = []
    for c in children:
        assert c.conn.poll(60)
        pids += c.conn.recv()
    zygote = s.zygote_pid
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
        with ForkServer(interpret=True, isolation="subreaper") as s:   # the control: same code, host network
            child = s.spawn("tests.test_reaper:try_network", port, tmp_path)
            assert child.conn.poll(60)
            control = child.conn.recv()
    finally:
        listener.close()
    assert answer.startswith("refused") and "unreachable" in answer, answer
    assert control == "connected"


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
