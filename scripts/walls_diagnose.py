"""Which of the judge's walls stops CUDA on this machine? Each wall alone, then a few splits of the suspects.

    sudo python3 scripts/walls_diagnose.py [LABEL_PART ...]   # on a GPU host, as root (as the judge runs there);
                                                                # only the plans whose label holds a LABEL_PART

`ksearch.eval.isolation.walls.probe` gives up walls until CUDA starts and names what it left out, but the
order it gives them up in can hide which one was the cause (a wall put back without its partner fails for
another reason). This script tries each wall on its own above the configuration known to work (own PID and
network namespaces, a private /proc, no capabilities) and prints one line per plan: ok, or why CUDA did not
start (only that is checked here).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from ksearch.eval.isolation import landlock, seccomp, walls

EVERY_DEVICE = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/nvidia*",
                "/dev/nvidia-caps/*", "/dev/dri/*")


@contextlib.contextmanager
def patched(obj: object, name: str, value: object) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def main() -> int:
    abi = landlock.abi_version()
    print(f"kernel {os.uname().release}; Landlock ABI {abi}; seccomp {seccomp.supported()}; uid {os.geteuid()}; "
          f"GPU nodes {walls._gpu_devices()}")
    base = walls.WallsPlan(private_proc=True, drop_caps=True, read_only=False)
    mounted = replace(base, mount="root")
    nobody = dict(uid=walls.NOBODY, gid=walls.NOBODY, needed=walls.needed_paths())
    plans: list[tuple[str, walls.WallsPlan, list[tuple[object, str, object]]]] = [
        ("known good: pid+net ns, private /proc, no caps", base, []),
        ("+ seccomp", replace(base, seccomp=True), []),
        ("+ uid nobody (no mount ns)", replace(base, **nobody), []),
        ("+ mount ns (writable)", mounted, []),
        ("+ mount ns, read-only", replace(mounted, read_only=True), []),
        ("+ mount ns, uid nobody", replace(mounted, **nobody), []),
    ]
    for level in sorted({min(abi, 3), min(abi, 4), abi} - {0}):
        plans.append((f"+ Landlock ABI {level}", replace(base, landlock_abi=level), []))
    if abi:
        shm_rules = landlock.Rules(("/dev/shm",))
        real_restrict = landlock.restrict
        plans.append((f"+ Landlock ABI {abi}, /dev/shm writable", replace(base, landlock_abi=abi),
                      [(landlock, "restrict", lambda rules, a: real_restrict(
                          landlock.Rules(rules.writable_dirs + shm_rules.writable_dirs), a))]))
        plans.append((f"+ Landlock ABI {abi}, every /dev node writable", replace(base, landlock_abi=abi),
                      [(landlock, "restrict", lambda rules, a: real_restrict(
                          landlock.Rules(rules.writable_dirs, EVERY_DEVICE), a))]))
    real_ro = walls.make_read_only

    def read_only_but_dev() -> None:
        real_ro()
        for point in ("/dev", "/dev/shm", "/dev/pts"):
            if os.path.ismount(point):
                walls._mount(None, point, None, walls.MS_REMOUNT | walls.MS_BIND)
    plans.append(("+ mount ns, read-only but /dev", replace(mounted, read_only=True),
                  [(walls, "make_read_only", read_only_but_dev)]))

    def read_only_but(points: tuple[str, ...]) -> Any:
        def make() -> None:
            real_ro()
            for point in points:
                if os.path.ismount(point):
                    walls._mount(None, point, None, walls.MS_REMOUNT | walls.MS_BIND)
        return make
    def only_root_read_only() -> None:
        real_ro()
        for point, _ in walls._mount_points():
            if point != "/":
                try:
                    walls._mount(None, point, None, walls.MS_REMOUNT | walls.MS_BIND)
                except OSError:
                    pass
    plans.append(("+ mount ns, read-only / alone (every submount writable)", replace(mounted, read_only=True),
                  [(walls, "make_read_only", only_root_read_only)]))
    for points in (("/proc",), ("/sys",), ("/proc", "/sys", "/dev"), ("/tmp",), ("/run",)):
        plans.append((f"+ mount ns, read-only but {' '.join(points)}", replace(mounted, read_only=True),
                      [(walls, "make_read_only", read_only_but(points))]))
    def landlock_also(extra: tuple[str, ...]) -> Any:
        return lambda rules, a: real_restrict(landlock.Rules(rules.writable_dirs + extra, EVERY_DEVICE), a)
    if abi:
        for extra in (("/proc",), ("/sys",), ("/proc", "/sys"), ("/tmp", "/run", "/var"), ("/",)):
            plans.append((f"+ Landlock ABI {abi}, {' '.join(extra)} writable", replace(base, landlock_abi=abi),
                          [(landlock, "restrict", landlock_also(extra))]))
    failed = 0
    # Only the question asked here: does CUDA start? (The probe's other checks - writes confined, the uid can
    # read what it needs - answer other questions and would fail the partial plans above.)
    real_check = walls._check
    walls._check = lambda plan, root, scratch, hidden: walls._cuda_problem()
    only = sys.argv[1:]
    for label, plan, patches in plans:
        if only and not any(o in label for o in only):
            continue
        t0 = time.perf_counter()
        with contextlib.ExitStack() as stack:
            for obj, name, value in patches:
                stack.enter_context(patched(obj, name, value))
            ok, why = walls._try(plan, True)
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {label:48s} {time.perf_counter() - t0:5.1f}s  {why[:400]}", flush=True)
    if not only or "probe" in only:
        t0 = time.perf_counter()
        walls._check = real_check
        plan = walls.probe(namespaces=True, private_proc=True)
        print(f"probe ({time.perf_counter() - t0:.1f}s): {plan.describe()} | notes: {list(plan.notes)}", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
