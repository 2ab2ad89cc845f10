"""Run the ksearch CLI as if a folder were on a read-only file system: `python -m tests.readonly_fs DIR ARGS...`.

The tests run as root in CI containers, where permission bits do not stop a write and mounting is not
allowed; a PEP 578 audit hook is the next best thing. Every call that would write, create, rename or
remove anything under DIR fails as the kernel fails it on a read-only mount (OSError EROFS); reads work.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_CHANGES = {"os.mkdir", "os.rename", "os.replace", "os.remove", "os.rmdir", "os.truncate", "os.chmod",
            "os.symlink", "os.link", "os.utime", "shutil.rmtree"}


def install(readonly: Path) -> None:
    root = os.path.realpath(readonly)

    def under(path: object) -> bool:
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, (str, os.PathLike)):
            return False
        full = os.path.realpath(os.fspath(path))
        return full == root or full.startswith(root + os.sep)

    def refuse(path: object) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path) if isinstance(path, (str, os.PathLike))
                      else str(path))

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                (isinstance(flags, int) and flags & _WRITE_FLAGS)
            if writes and under(path):
                refuse(path)
        elif event in _CHANGES:
            if any(under(a) for a in args[:2]):
                refuse(args[0])

    sys.addaudithook(hook)


if __name__ == "__main__":
    install(Path(sys.argv[1]))
    from ksearch.cli.main import main

    sys.exit(main(sys.argv[2:]))
