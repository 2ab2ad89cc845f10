"""The one width rule of every command that draws: `--width`, else $COLUMNS, else the terminal's, else 100.

Piped output (a log, CI, `| less`) still gets the terminal's width when stderr or stdin is one, so
`ksearch run` and `ksearch show` draw the same tree; with no terminal anywhere it is 100 columns.
"""

from __future__ import annotations

import os

#: Narrower than this, the tree's right-hand columns no longer fit beside a readable step.
MIN_WIDTH = 60
DEFAULT_WIDTH = 100


def terminal_width(explicit: int | None = None, default: int = DEFAULT_WIDTH) -> int:
    """The width to draw at: `--width`, else $COLUMNS, else the terminal's real width (also when stdout is
    piped, through stderr or stdin), else `default`."""
    if explicit is not None:
        if explicit < MIN_WIDTH:
            raise KeyError(f"--width {explicit}: the tree needs at least {MIN_WIDTH} columns")
        return explicit
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) >= MIN_WIDTH:
        return int(env)
    for fd in (1, 2, 0):
        try:
            cols = os.get_terminal_size(fd).columns
        except (OSError, ValueError):
            continue
        if cols > 0:
            return max(cols, MIN_WIDTH)
    return default
