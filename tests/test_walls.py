"""The kernel's walls around a candidate's process (ksearch.eval.isolation.walls), seen from inside a forked child.

Each child runs native-level attempts (plain os calls, no audit hook): writes outside its scratch folder,
/proc/sys and cgroup files, /dev/shm segments, the hidden task folder, a full scratch, escape system calls.
What the child may do depends on what the machine allows (root: everything; not root: a user namespace or
only Landlock and seccomp), so each assertion follows the plan the fork server probed and reports.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import uuid
from pathlib import Path

import pytest

from ksearch.eval.isolation import walls
from ksearch.eval.isolation.forkserver import ForkServer
from ksearch.eval.trusted.baseline_cache import CacheFile, default_path

SCRATCH_LIMIT = 16 << 20


# ---- runs in the child ------------------------------------------------------------------------------------
def _try_write(path: str) -> str:
    try:
        with open(path, "w") as f:
            f.write("x")
        return "written"
    except OSError as e:
        return e.strerror or str(e)


def look_around(conn, payload: dict) -> None:
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    report = {
        "uid": os.getuid(), "gid": os.getgid(), "cap_eff": int(status["CapEff"], 16),
        "no_new_privs": status["NoNewPrivs"].strip(), "seccomp": status["Seccomp"].strip(),
        "nproc": list(resource.getrlimit(resource.RLIMIT_NPROC)),
        "scratch": _try_write(os.path.join(os.getcwd(), "inside.txt")),
        "tmp": _try_write(payload["outside"]),
        "repo": _try_write(str(Path(payload["repo"]) / f"ksearch_walls_{uuid.uuid4().hex[:6]}.txt")),
        "baseline_cache": _try_write(payload["baseline_cache"]),
        "core_pattern": _try_write("/proc/sys/kernel/core_pattern"),
        "cgroup": _try_write("/sys/fs/cgroup/ksearch_walls_probe"),
        "dev_null": _try_write("/dev/null"),
        "shm": _try_write(f"/dev/shm/ksearch_walls_{payload['tag']}"),
        "shm_listing": sorted(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else [],
        "hidden_listing": sorted(os.listdir(payload["hidden"])) if os.path.isdir(payload["hidden"]) else None,
        "home_listing": None,
    }
    try:
        report["home_listing"] = sorted(os.listdir(os.path.expanduser("~root")))
    except OSError as e:
        report["home_listing"] = e.strerror
    try:                                        # fill the scratch folder past its limit
        with open("big.bin", "wb") as f:
            chunk = b"\0" * (1 << 20)
            for _ in range(payload["fill_mib"]):
                f.write(chunk)
        report["fill"] = "filled"
    except OSError as e:
        report["fill"] = e.strerror
    conn.send(report)


def escape_call(conn, which: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    conn.send("calling")
    if which == "unshare_user":
        libc.unshare(0x10000000)
    elif which == "ptrace":
        libc.ptrace(16, os.getppid(), 0, 0)          # PTRACE_ATTACH
    elif which == "mount":
        libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, None)
    conn.send(f"returned: {os.strerror(ctypes.get_errno())}")


def leave_things(conn, tag: str) -> None:
    Path("left.bin").write_bytes(b"x" * 4096)
    try:
        Path(f"/dev/shm/ksearch_walls_{tag}").write_bytes(b"x" * 4096)
        conn.send("left")
    except OSError as e:                # Landlock without a private /dev/shm: refused outright
        conn.send(e.strerror)
    conn.recv()


# ---- runs in pytest ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server():
    with ForkServer(interpret=True, scratch_bytes=SCRATCH_LIMIT) as s:
        yield s


def _look(server, tmp_path, hidden=None):
    tag = uuid.uuid4().hex[:8]
    hidden = hidden or tmp_path / "tasks"
    hidden.mkdir(exist_ok=True)
    (hidden / "task.yaml").write_text("correctness: {atol: 0.01}\n")
    outside = f"/tmp/ksearch_walls_outside_{tag}"
    CacheFile(default_path()).close()           # the baseline cache the trusted worker keeps (in the tests' cache)
    payload = {"outside": outside, "repo": str(Path(__file__).resolve().parents[1]), "tag": tag,
               "baseline_cache": str(default_path()),
               "hidden": str(hidden), "fill_mib": (SCRATCH_LIMIT >> 20) + 8}
    child = server.spawn("tests.test_walls:look_around", payload, tmp_path / "scratch", hidden=[str(hidden)])
    assert child.conn.poll(120), child.output()[0][-3000:]
    report = child.conn.recv()
    assert child.wait(30) == 0, child.output()[0][-3000:]
    return report, outside, tag


def test_the_plan_is_reported(server):
    plan = server.walls_plan
    assert plan is not None and "walls: " in server.isolation_note
    assert plan.describe() in server.isolation_note and walls.current() == plan


def test_the_child_writes_only_its_scratch(server, tmp_path):
    plan = server.walls_plan
    report, outside, tag = _look(server, tmp_path)
    try:
        assert report["scratch"] == "written" and report["dev_null"] == "written"
        assert report["cap_eff"] == 0 and report["no_new_privs"] == "1"
        if plan.mount or plan.landlock_abi:
            for key in ("tmp", "repo", "core_pattern", "cgroup", "baseline_cache"):
                assert report[key] != "written", (key, report)
            assert not os.path.exists(outside)
        if plan.seccomp:
            assert report["seccomp"] == "2"
    finally:
        if os.path.exists(outside):
            os.unlink(outside)


def test_root_runs_it_as_nobody_in_a_read_only_world(server, tmp_path):
    plan = server.walls_plan
    if plan.mount != "root":
        pytest.skip(f"no mount namespace as root here: {plan.describe()}")
    report, _, _ = _look(server, tmp_path)
    if plan.uid is not None:
        assert (report["uid"], report["gid"]) == (walls.NOBODY, walls.NOBODY)
        # nobody's tasks are capped by the kernel even where no control group counts them
        assert plan.uid_tasks == walls.uid_tasks_cap() and report["nproc"] == [plan.uid_tasks] * 2
        assert f"its tasks capped at {plan.uid_tasks}" in server.isolation_note
    for key in ("tmp", "repo", "core_pattern", "cgroup", "baseline_cache"):
        assert report[key] in ("Read-only file system", "Permission denied"), (key, report)


def test_scratch_is_a_bounded_tmpfs_and_shm_is_private(server, tmp_path):
    plan = server.walls_plan
    if not plan.mount:
        pytest.skip(f"no mount namespace here: {plan.describe()}")
    report, _, tag = _look(server, tmp_path)
    assert report["fill"] == "No space left on device", report["fill"]
    assert report["shm"] == "written"                                  # its own /dev/shm
    assert report["shm_listing"] == [f"ksearch_walls_{tag}"]           # and nothing of the host's in it
    assert not os.path.exists(f"/dev/shm/ksearch_walls_{tag}")         # nor anything of its on the host


def test_the_task_folder_is_hidden(server, tmp_path):
    plan = server.walls_plan
    if not plan.mount:
        pytest.skip(f"no mount namespace here: {plan.describe()}")
    report, _, _ = _look(server, tmp_path)
    assert report["hidden_listing"] in ([], None), report["hidden_listing"]


def test_folders_nobody_cannot_traverse_are_veiled(server, tmp_path):
    plan = server.walls_plan
    if plan.uid is None or not os.path.isdir(os.path.expanduser("~root")):
        pytest.skip("the candidate keeps its uid here")
    home = os.path.expanduser("~root")
    report, _, _ = _look(server, tmp_path)
    if not walls.veils_for(list(plan.needed), plan.uid, plan.gid).get(home):
        pytest.skip(f"{home} is traversable or holds nothing the candidate needs")
    # only what the candidate needs is bound back in: no dot files, no credentials
    needed_tops = {Path(p).relative_to(home).parts[0] for p in plan.needed if p.startswith(home + os.sep)}
    assert set(report["home_listing"]) == needed_tops, report["home_listing"]


def test_nothing_outlives_a_killed_child(server, tmp_path):
    if not (server.walls_plan.mount or server.walls_plan.landlock_abi):
        pytest.skip("no walls that keep /dev/shm here")
    tag = uuid.uuid4().hex[:8]
    scratch = tmp_path / "scratch"
    child = server.spawn("tests.test_walls:leave_things", tag, scratch)
    assert child.conn.poll(120), child.output()[0][-3000:]
    assert child.conn.recv() == ("left" if server.walls_plan.mount else "Permission denied")
    child.kill()
    assert not os.path.exists(f"/dev/shm/ksearch_walls_{tag}")
    if server.walls_plan.mount:
        assert list(scratch.iterdir()) == []          # its scratch was a tmpfs of its own namespace


@pytest.mark.parametrize("which", ["unshare_user", "ptrace", "mount"])
def test_escape_calls_kill_the_process(server, tmp_path, which):
    if not server.walls_plan.seccomp:
        pytest.skip("no seccomp filter here")
    child = server.spawn("tests.test_walls:escape_call", which, tmp_path / "scratch")
    assert child.conn.poll(120) and child.conn.recv() == "calling"
    assert child.wait(30) == -signal.SIGSYS, (child.exit_description(), child.output()[0][-2000:])


def test_veils_cover_the_topmost_folder_and_keep_the_outermost_paths(tmp_path):
    closed = tmp_path / "closed"
    (closed / "a" / "b").mkdir(parents=True)
    (closed / "c").mkdir()
    closed.chmod(0o700)
    try:
        veils = walls.veils_for([str(closed / "a"), str(closed / "a" / "b"), str(closed / "c")], walls.NOBODY,
                                walls.NOBODY)
    finally:
        closed.chmod(0o755)
    above = [v for v in veils if str(closed).startswith(v)]
    assert len(above) == 1 and sorted(veils[above[0]]) == [str(closed / "a"), str(closed / "c")]


def shell_writes(conn, mark: str) -> None:
    from multiprocessing import util

    pid = util.spawnv_passfds(b"/bin/sh", [b"sh", b"-c", f"echo pwned > {mark}".encode()], [])
    os.waitpid(pid, 0)
    conn.send(os.path.exists(mark))


def test_a_shell_started_without_an_audit_event_writes_nothing_outside(server, tmp_path):
    """The control (no walls) shows the shell would have written the file."""
    plan = server.walls_plan
    if not (plan.mount or plan.landlock_abi):
        pytest.skip(f"no walls that confine writes here: {plan.describe()}")
    mark = f"/tmp/ksearch_walls_shell_{uuid.uuid4().hex[:8]}"
    try:
        child = server.spawn("tests.test_walls:shell_writes", mark, tmp_path / "walled")
        assert child.conn.poll(120) and child.conn.recv() is False
        assert not os.path.exists(mark)
        with ForkServer(interpret=True, walls=False) as control:
            child = control.spawn("tests.test_walls:shell_writes", mark, tmp_path / "open")
            assert child.conn.poll(120) and child.conn.recv() is True
    finally:
        if os.path.exists(mark):
            os.unlink(mark)


def honest_io(conn, payload) -> None:
    import tempfile

    with open("/dev/stdout", "w") as f:           # reopened through /proc/self/fd: the pipe is the child's
        f.write("through /dev/stdout\n")
    with tempfile.NamedTemporaryFile("w", delete=False) as f:
        f.write("t")
    conn.send((f.name.startswith(os.getcwd()), os.path.expanduser("~").startswith(os.getcwd())))


def test_what_honest_code_does_still_works(server, tmp_path):
    child = server.spawn("tests.test_walls:honest_io", None, tmp_path / "scratch")
    assert child.conn.poll(120), child.output()[0][-3000:]
    assert child.conn.recv() == (True, True)
    assert child.wait(30) == 0 and "through /dev/stdout" in child.output()[0]


def spawn_in_own_group(conn, payload) -> None:
    """What ninja does for every compile step: posix_spawn with the child in a process group of its own."""
    import shutil

    true = shutil.which("true") or "/bin/true"
    try:
        pid = os.posix_spawn(true, [true], dict(os.environ), setpgroup=0)
        conn.send(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    except OSError as e:
        conn.send(e.strerror or str(e))


def test_the_toolchain_may_put_its_steps_in_groups_of_their_own(server, tmp_path):
    """A seccomp rule once refused setpgid (to keep a candidate's processes in the group the judge stops):
    ninja then failed with "posix_spawn: Operation not permitted" in every walled child, so every CUDA
    candidate's build would have failed on the GPU host."""
    child = server.spawn("tests.test_walls:spawn_in_own_group", None, tmp_path / "scratch")
    assert child.conn.poll(120), child.output()[0][-3000:]
    assert child.conn.recv() == 0
    assert child.wait(30) == 0


def test_a_wall_that_stops_cuda_is_left_out_and_said(monkeypatch):
    """On the H200 the first walls failed every candidate (cudaGetDeviceCount error 304): the probe now
    checks CUDA inside the walls and drops what stops it, naming it in the plan's notes."""
    from ksearch.eval.isolation import walls

    def fake_try(plan, new_pid_ns):
        if plan.landlock_abi:
            return False, f"{walls.CUDA_PREFIX}: RuntimeError: error 304"
        return True, ""

    monkeypatch.setattr(walls, "_try", fake_try)
    monkeypatch.setattr(walls.landlock, "abi_version", lambda: 5)
    monkeypatch.setattr(walls.seccomp, "supported", lambda: True)
    plan = walls.probe(False, False)
    assert plan.landlock_abi == 0 and plan.seccomp and plan.drop_caps
    assert any(n.startswith("Landlock left out: " + walls.CUDA_PREFIX) for n in plan.notes), plan.notes
    assert "Landlock" not in plan.describe().split(" [")[0] and "seccomp filter" in plan.describe()


def _full_plan():
    from ksearch.eval.isolation import walls

    return walls.WallsPlan(mount="root", private_proc=True, uid=walls.NOBODY, gid=walls.NOBODY, needed=("/usr",),
                           landlock_abi=5, seccomp=True, drop_caps=True)


def _ladder(stops_cuda):
    """Run the CUDA ladder from the full plan against a machine where `stops_cuda(plan)` says CUDA fails."""
    from ksearch.eval.isolation import walls

    tried = []

    def fake_try(plan, new_pid_ns):
        tried.append(plan)
        return (False, f"{walls.CUDA_PREFIX}: error 304") if stops_cuda(plan) else (True, "")

    found, notes = walls._without_what_stops_cuda(_full_plan(), True, tryer=fake_try)
    return found, notes, tried


@pytest.mark.parametrize("culprit, kept", [
    ("seccomp", dict(mount="root", uid=65534, landlock_abi=5, read_only=True, private_proc=True, drop_caps=True)),
    ("read_only", dict(mount="root", uid=65534, landlock_abi=5, seccomp=True, private_proc=True, drop_caps=True)),
    ("uid", dict(mount="root", landlock_abi=5, seccomp=True, read_only=True, private_proc=True, drop_caps=True)),
    ("mount", dict(uid=65534, landlock_abi=5, seccomp=True, private_proc=True, drop_caps=True)),
])
def test_the_cuda_ladder_leaves_out_only_the_wall_that_stops_cuda(culprit, kept):
    from ksearch.eval.isolation import walls

    def stops(plan):
        return walls._has(plan, culprit)

    found, notes, tried = _ladder(stops)
    assert found is not None and not walls._has(found, culprit)
    for field, value in kept.items():
        assert getattr(found, field) == value, (field, found)
    assert len(notes) == 1 and notes[0].startswith(dict(walls._LADDER)[culprit] + " left out: "), notes
    assert len(tried) <= 2 * len(walls._LADDER)


def test_a_cuda_that_needs_a_matching_proc_keeps_the_private_proc():
    """A candidate in its own PID namespace with the host's /proc (the walls' last fallback on the H200, which
    then failed every candidate): the ladder must end where the judge before the walls ran."""
    from ksearch.eval.isolation import walls

    found, notes, _ = _ladder(lambda plan: not plan.private_proc or (plan.mount and plan.read_only))
    assert found is not None and found.private_proc and found.mount == "root" and not found.read_only
    assert found.seccomp and found.landlock_abi and found.uid == walls.NOBODY and found.drop_caps


def test_no_ladder_step_helps_when_cuda_never_starts():
    from ksearch.eval.isolation import walls

    found, notes, tried = _ladder(lambda plan: True)
    assert found is None and notes[0].startswith("CUDA does not start even without any of the walls")
    assert not walls._has(tried[-1], "drop_caps") and not tried[-1].mount


def test_the_last_fallback_is_the_judge_before_the_walls(monkeypatch):
    """When no walls hold, children still get what ran on the H200 before them: a private /proc in their own
    PID namespace, no capabilities."""
    from ksearch.eval.isolation import walls

    monkeypatch.setattr(walls, "_try", lambda plan, new_pid_ns: (False, "mount /: Operation not permitted"))
    monkeypatch.setattr(walls.landlock, "abi_version", lambda: 0)
    monkeypatch.setattr(walls.seccomp, "supported", lambda: False)
    plan = walls.probe(True, True, want_uid=False)
    assert plan.private_proc and plan.drop_caps and not plan.mount
    assert "private /proc" in plan.describe() and "no kernel walls could be built" in plan.describe()


def test_a_private_proc_without_a_mount_namespace_is_applied(monkeypatch, tmp_path):
    from ksearch.eval.isolation import walls

    calls = []
    monkeypatch.setattr(walls.reaper, "make_private_proc", lambda: calls.append("proc"))
    walls.apply(walls.WallsPlan(private_proc=True, drop_caps=False), walls.ChildWalls(str(tmp_path)))
    assert calls == ["proc"]


def test_a_plan_round_trips_through_json():
    from ksearch.eval.isolation import walls

    plan = walls.WallsPlan(mount="root", read_only=False, private_proc=True, notes=("x",), needed=("/usr",))
    assert walls.from_json(walls.to_json(plan)) == plan
