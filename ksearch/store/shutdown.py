"""How a run ends when it is told to stop (SIGTERM) or the disk fills: one line, the journal intact.

The journal is written so that any prefix of it is a run that `ksearch resume` continues (records are
whole lines, fsync'd; a torn last line is dropped). A SIGTERM (a batch scheduler, `docker stop`, `kill`)
or a full disk therefore loses at most the step in flight. What matters is that the process says so in
one line, with the command that continues, instead of a traceback or nothing.

SIGTERM becomes `Terminated`, raised in the main thread like Ctrl-C's KeyboardInterrupt (it subclasses it,
so every place that cleans up after Ctrl-C - killing evaluator workers, closing the journal, marking a
sweep arm interrupted - does the same here). A second SIGTERM while cleaning up kills the process at once.
"""

from __future__ import annotations

import errno
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: 128 + SIGTERM, what a shell reports for a process a SIGTERM ended.
EXIT_TERMINATED = 128 + signal.SIGTERM
#: The disk (or the user's quota) is full: the errno of ENOSPC, so that scripts can tell it from a failure.
EXIT_DISK_FULL = errno.ENOSPC

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


class Terminated(KeyboardInterrupt):
    """SIGTERM asked this process to stop; raised where the main thread is, like Ctrl-C."""


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


@contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """Within the block, SIGTERM raises Terminated (once). Outside the main thread this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()

    def handler(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)     # a second SIGTERM ends the process at once
        if os.getpid() != owner:      # a child forked without exec inherited this handler: die as asked
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def terminated_message(run_dir: str | Path) -> str:
    return (f"stopped by SIGTERM; the journal is intact up to the last completed step: "
            f"`ksearch resume {run_dir}` continues the run")


def disk_full_message(run_dir: str | Path, exc: OSError) -> str:
    what = f" writing {exc.filename}" if exc.filename else ""
    return (f"the disk is full ({exc.strerror or os.strerror(exc.errno or errno.ENOSPC)}{what}); the journal is "
            f"intact up to the last completed step: free some space, then `ksearch resume {run_dir}` continues "
            f"the run")
