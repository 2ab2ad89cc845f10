"""The fork server: a fresh, set-up child per call, talked to over its own connection, its output bounded,
its end described; the zygote comes back when it dies; the per-child overhead is small."""

from __future__ import annotations

import os
import statistics
import sys
import time

import pytest

from ksearch.eval.isolation import reaper
from ksearch.eval.isolation.forkserver import CACHE_VARS, ForkServer, ForkServerError
from ksearch.eval.parent.worker_handle import wait_for


# ---- runs in the child ------------------------------------------------------------------------------------
def _open_fds() -> list[int]:
    fds = []
    for name in os.listdir("/proc/self/fd"):      # the listing's own descriptor is closed by now
        try:
            os.fstat(int(name))
            fds.append(int(name))
        except OSError:
            pass
    return sorted(fds)


def describe_self(conn, payload) -> None:
    import tempfile

    import torch

    conn.send({"payload_len": len(payload), "fds": _open_fds(),
               "cwd": os.getcwd(), "env": {v: os.environ[v] for v in CACHE_VARS}, "tmp": tempfile.gettempdir(),
               "interpret": os.environ.get("TRITON_INTERPRET"), "sum": float(torch.ones(4).sum())})
    reply = conn.recv()
    conn.send(reply * 2)


def behave(conn, payload: str) -> None:
    if payload == "print":
        print("hello out")
        print("hello err", file=sys.stderr)
    elif payload == "raise":
        raise ValueError("bad launch configuration")
    elif payload == "exit7":
        sys.exit(7)
    elif payload == "segv":
        import ctypes
        ctypes.string_at(0)
    elif payload == "flood":
        chunk = b"x" * 65536
        for _ in range(200):                  # 12.5 MiB straight to fd 1
            os.write(1, chunk)
    elif payload == "hang":
        time.sleep(600)


def noop(conn, payload) -> None:
    conn.send(time.perf_counter())


# ---- runs in pytest ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server():
    with ForkServer(interpret=True) as s:
        yield s


def test_child_is_set_up_and_talks_over_its_connection(server, tmp_path):
    big = b"\x01" * (8 << 20)
    child = server.spawn("tests.test_forkserver:describe_self", big, tmp_path)
    assert child.conn.poll(60), child.output()[0]
    info = child.conn.recv()
    child.conn.send(21)
    assert child.conn.recv() == 42
    assert child.wait(30) == 0 and child.exit_description() == "exited, exit code 0"
    assert info["payload_len"] == len(big) and info["sum"] == 4.0 and info["interpret"] == "1"
    assert info["fds"] == [0, 1, 2, 3]                 # no zygote control socket, no other child's pipes
    scratch = str(tmp_path.resolve())
    assert info["cwd"] == scratch and info["tmp"].startswith(scratch)
    assert all(path.startswith(scratch) for path in info["env"].values()), info["env"]


@pytest.mark.parametrize("behaviour,code,text", [
    ("print", 0, "hello out"), ("raise", 1, "ValueError: bad launch configuration"), ("exit7", 7, ""),
    ("segv", -11, "Fatal Python error: Segmentation fault"),
])
def test_exit_and_output_are_reported(server, tmp_path, behaviour, code, text):
    child = server.spawn("tests.test_forkserver:behave", behaviour, tmp_path)
    assert child.wait(60) == code
    out, _ = child.output()
    assert text in out, out[-2000:]
    if code == -11:
        assert "SIGSEGV" in child.exit_description()


def test_output_flood_is_bounded(server, tmp_path):
    child = server.spawn("tests.test_forkserver:behave", "flood", tmp_path)
    assert child.wait(60) == 0
    out, total = child.output()
    assert total == 200 * 65536 and len(out) < 40_000 and "bytes omitted" in out


def test_hanging_child_is_killed(server, tmp_path):
    child = server.spawn("tests.test_forkserver:behave", "hang", tmp_path)
    assert child.wait(1.0) is None and child.alive()
    child.kill()
    assert child.returncode == -9 and "SIGKILL" in child.exit_description()
    assert not reaper.alive(child.pid)


def test_children_are_independent(server, tmp_path):
    a = server.spawn("tests.test_forkserver:behave", "hang", tmp_path / "a")
    b = server.spawn("tests.test_forkserver:behave", "print", tmp_path / "b")
    assert b.wait(60) == 0 and a.alive()
    a.kill()
    assert a.returncode == -9


def test_zygote_restarts_after_dying(tmp_path):
    with ForkServer(interpret=True) as s:
        first = s.zygote_pid
        hanging = s.spawn("tests.test_forkserver:behave", "hang", tmp_path / "h")
        os.kill(first, 9)
        assert hanging.wait(30) is not None                # its children die with it
        assert wait_for(lambda: not reaper.alive(hanging.pid), 5)
        child = s.spawn("tests.test_forkserver:behave", "print", tmp_path / "p")
        assert child.wait(60) == 0 and s.zygote_pid != first


def test_bad_target_is_a_clear_error(server, tmp_path):
    with pytest.raises(ValueError, match="module:function"):
        server.spawn("no_colon", None, tmp_path)
    child = server.spawn("tests.test_forkserver:no_such_function", None, tmp_path)
    assert child.wait(60) == 1 and "AttributeError" in child.output()[0]


def test_requesting_unavailable_isolation_fails_clearly():
    ok, _ = reaper.namespaces_available()
    if ok:
        pytest.skip("namespaces are available here")
    with pytest.raises(ForkServerError, match="namespaces"):
        ForkServer(isolation="namespaces")


def _cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` and of its reaped children (the forked candidates), from /proc."""
    stat = open(f"/proc/{pid}/stat").read()
    fields = stat[stat.rindex(")") + 2:].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("isolation", ["namespaces", "subreaper"])
def test_overhead(tmp_path, isolation):
    """Per-child cost: spawn() until the target runs, and until its end (and its namespace's) is reported."""
    if isolation == "namespaces" and not reaper.namespaces_available()[0]:
        pytest.skip("namespaces are not permitted here")
    # the target's module is preloaded, as the evaluator's harness module will be
    with ForkServer(preload=["tests.test_forkserver"], interpret=True, isolation=isolation) as s:
        starts, totals = [], []
        cpu0 = 0.0
        for i in range(12):
            if i == 2:
                cpu0 = _cpu_seconds(s.zygote_pid)
            t0 = time.perf_counter()
            child = s.spawn("tests.test_forkserver:noop", None, tmp_path / str(i))
            ran = child.conn.recv()
            assert child.wait(30) == 0
            totals.append((time.perf_counter() - t0) * 1e3)
            starts.append((ran - t0) * 1e3)
        cpu_ms = (_cpu_seconds(s.zygote_pid) - cpu0) / 10 * 1e3
        start_ms, total_ms = statistics.median(starts[2:]), statistics.median(totals[2:])
        print(f"\nforkserver overhead ({isolation}, load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus): "
              f"zygote start {s.startup_s:.1f} s; per child: to target {start_ms:.1f} ms, "
              f"spawn to reaped {total_ms:.1f} ms (median of 10); CPU time {cpu_ms:.1f} ms per child "
              f"(zygote + child + init)")
        assert total_ms < 1000, totals          # tens of ms on an idle machine; generous for a loaded one


def report_cpus(conn, payload) -> None:
    import torch

    conn.send({"cpus": sorted(os.sched_getaffinity(0)), "threads": torch.get_num_threads()})


def test_children_run_on_the_cpus_given_to_the_zygote(tmp_path):
    """ksearch.eval.isolation.cpus: the candidates' CPUs apart from the judge's, their thread team sized to them."""
    first = min(os.sched_getaffinity(0))
    with ForkServer(cpus=(first,), walls=False) as s:
        child = s.spawn("tests.test_forkserver:report_cpus", None, tmp_path)
        assert child.conn.poll(60), child.output()[0]
        assert child.conn.recv() == {"cpus": [first], "threads": 1}
        assert "candidates on 1 CPUs of their own" in s.isolation_note
