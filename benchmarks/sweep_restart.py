"""What the GPU sweeps share about a CUDA context that an error has made unusable.

After an illegal address, a launch failure or a device-side assert every later call in the process fails,
so a sweep stops measuring, saves what it has, and replaces itself with a fresh process that resumes with
what is still pending (`--resume=N`, N counting the restarts). Run the sweeps with the repository on
PYTHONPATH (as their docstrings say).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

STICKY_CUDA_ERRORS = ("illegal memory access", "illegal address", "unspecified launch failure",
                      "misaligned address", "an illegal instruction", "device-side assert")


def is_sticky(error: BaseException) -> bool:
    """Does this error leave the process's CUDA context unusable?"""
    return any(s in str(error) for s in STICKY_CUDA_ERRORS)


def restart_for_the_rest(script: str, restarts: int, argv: list[str] | None, message: str) -> None:
    """Say `message`, then become a fresh run of `script` with the same arguments and --resume=restarts+1."""
    print(message, flush=True)
    rest = [a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("--resume")]
    os.execv(sys.executable, [sys.executable, str(Path(script).resolve()), *rest, f"--resume={restarts + 1}"])
