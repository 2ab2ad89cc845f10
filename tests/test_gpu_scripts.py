"""The device-call scripts (scripts/*.sh) parse, and bench_sets.sh turns a bad spec into one line and exit 2.

They run only on the device machine, where a syntax error costs a whole call of a scarce budget; these checks
need no GPU."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "scripts").glob("*.sh"))


def test_there_are_device_scripts():
    names = {p.name for p in SCRIPTS}
    assert {"gpu_smoke.sh", "bench_sets.sh", "decode_measure.sh"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses(script):
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_bench_sets_bad_spec_is_one_line_and_exit_2(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}       # set: the script leaves the GPU bundle alone
    r = subprocess.run(["bash", str(ROOT / "scripts" / "bench_sets.sh"), str(tmp_path), "nokey:full:gpu_time:x.py"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert len(summary) == 1 and "nokey:full:gpu_time:x.py" in summary[0] and "KEY one of" in summary[0]


@pytest.mark.parametrize("name,value", [("LIMIT", "-148"), ("TOTAL", "12s")])
def test_bench_sets_refuses_a_time_that_is_not_whole_seconds(tmp_path, name, value):
    env = {**os.environ, "PYTHONPATH": str(ROOT), name: value}
    r = subprocess.run(["bash", str(ROOT / "scripts" / "bench_sets.sh"), str(tmp_path), "gqa:full:gpu_time:x.py"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2
    summary = (tmp_path / "summary.txt").read_text().splitlines()
    assert summary == [f"bench_sets: {name} must be a whole number of seconds, got '{value}'"]
