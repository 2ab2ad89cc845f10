"""Running `ksearch` the way a user does: a fresh process, its own stdout and stderr, optionally a terminal.

`ksearch(...)` runs `python -m ksearch` from the repository root; `in_terminal(...)` runs it with a
pseudo-terminal as stdin, stdout and stderr (what `ksearch tui` needs) and returns what the terminal
showed; `one_line_error(...)` is the contract for bad input: exit code 2, one line on stderr that starts
with `error:`, nothing on stdout that looks like an error, no traceback anywhere.
"""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env.update(extra)
    return env


def ksearch(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
            prefix: tuple[str, ...] = ("-m", "ksearch")) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *prefix, *map(str, args)], capture_output=True, text=True,
                          env=env if env is not None else cli_env(), cwd=ROOT, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def one_line_error(p: subprocess.CompletedProcess) -> str:
    """The refusal's text, after checking the contract (see module doc)."""
    assert p.returncode == 2, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert "Traceback" not in p.stdout + p.stderr, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert "error:" not in p.stdout, p.stdout
    return lines[0]


def in_terminal(*args: str, timeout: float = 60, env: dict[str, str] | None = None) -> tuple[int | None, str]:
    """(exit code or None when it had to be killed at `timeout`, what the terminal showed, escapes removed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "ksearch", *map(str, args)], stdin=slave, stdout=slave,
                            stderr=slave, cwd=ROOT, env=env if env is not None else cli_env(TERM="xterm"),
                            close_fds=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:          # the other side closed: the process is gone
                    chunk = b""
                if not chunk and proc.poll() is not None:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        code = proc.poll()
        if code is None:
            proc.kill()
            proc.wait()
    finally:
        os.close(master)
    return code, _ANSI.sub("", out.decode(errors="replace")).replace("\r", "")
