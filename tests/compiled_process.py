"""A fresh Python process that compiles for the GPU for real: the test suite runs Triton's interpreter
(TRITON_INTERPRET=1), so a test that asks ptxas for registers and shared memory runs its script without it,
from the repository root, with the repository first on PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ksearch import PROJECT_ROOT


def run_compiled(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """`python ARGS` in such a process; stdout and stderr captured as text."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=str(PROJECT_ROOT),
                          timeout=timeout)


def skip_without_ptxas(proc: subprocess.CompletedProcess) -> None:
    """Skip the test when the process failed only because this Triton install has no ptxas."""
    if proc.returncode != 0 and "ptxas" in proc.stderr and "not found" in proc.stderr.lower():
        pytest.skip("no ptxas in this Triton install")
