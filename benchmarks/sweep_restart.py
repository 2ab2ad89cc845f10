"""What the GPU sweeps share about a CUDA context that an error has made unusable.

After an illegal address, a launch failure or a device-side assert every later call in the process fails,
so a sweep stops measuring, saves what it has, and replaces itself with a fresh process that resumes with
what is still pending (`--resume=N`, N counting the restarts). Run the sweeps with the repository on
PYTHONPATH (as their docstrings say).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def run_resumable(sweep: Any, out_json: Path, script: str, restarts: int, max_restarts: int, argv: list[str] | None,
                  name: str, pending: str, table: Callable[[dict[str, Any]], str]) -> None:
    """One sweep run, as each sweep's main ends: resume from `out_json` on a restart, measure, replace the
    process (up to `max_restarts` times) when the CUDA context was lost, else print the table.

    `sweep` has resume_from(doc), run() -> doc (written to `out_json`) and `poisoned`; `pending` names what
    a restart still measures ("settings", "variants")."""
    if restarts and out_json.is_file():
        sweep.resume_from(json.loads(out_json.read_text()))
    doc = sweep.run()
    if sweep.poisoned and restarts < max_restarts:
        restart_for_the_rest(script, restarts, argv,
                             f"{name}: CUDA context lost; restarting to measure the remaining {pending}")
    print(table(doc), flush=True)
    print(f"wrote {out_json} in {doc['elapsed_s']:.0f}s", flush=True)
