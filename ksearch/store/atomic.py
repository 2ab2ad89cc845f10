"""One way to replace a file so that a reader, or a crash, sees the old content or the new, never half."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def atomic_write(path: str | Path, text: str) -> Path:
    """Write `text` to a temporary sibling, fsync it, rename it over `path` (parents are created).

    The file gets the permissions any new file gets here (0666 less the umask, as `open` gives): a run
    directory shared with a team stays readable by it. (tempfile.mkstemp would make every file 0600.)"""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_sibling(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _create_sibling(path: Path) -> tuple[int, str]:
    """A new, exclusively created temporary file beside `path`; the kernel applies the umask to 0o666."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file beside {path}")
