"""Tables that never cut a name the user must type: a table when it fits the width, else one block per row.

A task name, a run folder or a model name is something a user copies into the next command; rich's
tables squeeze every column when the terminal is narrow and cut or fold such names. Here the columns
marked `whole` keep their full width on one line, the other columns wrap (never below a readable
width); when even that does not fit, each row becomes a small block: its first column on a line of its
own, then one `column: value` line per other column.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, Group, JustifyMethod, RenderableType
from rich.table import Table
from rich.text import Text

#: A wrapping column is never squeezed below its longest word (names are not broken), up to this many
#: characters, nor below READABLE characters (or its longest value, if shorter).
READABLE, LONGEST_WORD = 10, 24
#: Characters a rich table with the default box spends per column (padding and the rule), plus the edge.
_PER_COLUMN, _EDGE = 3, 1


@dataclass(frozen=True)
class Column:
    name: str
    whole: bool = False          # a value the user types: shown on one line, never cut
    justify: JustifyMethod = "left"


def _plain(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else Text.from_markup(cell).plain


def _cell(cell: str | Text, whole: bool) -> Text:
    """The cell as Text that wraps (or, whole, never does) whatever the console's soft-wrap setting is."""
    text = cell.copy() if isinstance(cell, Text) else Text.from_markup(cell)
    text.no_wrap, text.overflow = whole, "fold"
    return text


def _min_width(col: Column, i: int, rows: Sequence[Sequence[str | Text]]) -> int:
    values = [col.name, *(_plain(r[i]) for r in rows)]
    longest = max(len(v) for v in values)
    if col.whole:
        return longest
    word = max((len(w) for v in values for w in v.split()), default=0)
    return max(min(longest, READABLE), min(word, LONGEST_WORD))


def needed_width(columns: Sequence[Column], rows: Sequence[Sequence[str | Text]]) -> int:
    """The narrowest table that keeps `whole` columns on one line and the others readable."""
    return _EDGE + sum(_PER_COLUMN + _min_width(col, i, rows) for i, col in enumerate(columns))


def _fits(table: Table, width: int) -> bool:
    out = io.StringIO()
    Console(file=out, width=width, soft_wrap=True).print(table)
    return all(len(line) <= width for line in out.getvalue().splitlines())


def fit_table(columns: Sequence[Column], rows: Sequence[Sequence[str | Text]], width: int, *,
              title: str | None = None, caption: str | None = None) -> RenderableType:
    """`rows` as a table no wider than `width` when it fits, else as one block per row (see module doc)."""
    if needed_width(columns, rows) <= width:
        t = Table(title=title, caption=caption)
        for i, col in enumerate(columns):
            t.add_column(col.name, no_wrap=col.whole, overflow="fold", min_width=_min_width(col, i, rows),
                         justify=col.justify)
        for r in rows:
            t.add_row(*(_cell(c, col.whole) for c, col in zip(r, columns)))
        if _fits(t, width):      # rich may still need more than the estimate (a long word it will not fold)
            return t
    parts: list[RenderableType] = []
    if title:
        parts.append(Text(title, style="italic"))
    for r in rows:
        head = r[0] if isinstance(r[0], Text) else Text.from_markup(r[0])
        parts.append(Text.assemble(head.copy(), style="bold"))
        block = Table.grid(padding=(0, 1))         # a grid wraps its cells at the width, also when the
        block.add_column(no_wrap=True, style="dim")  # console does not wrap plain text (soft_wrap)
        block.add_column(overflow="fold")
        for col, cell in zip(columns[1:], r[1:]):
            block.add_row(_cell(f"  {col.name}:", True), _cell(cell, False))
        parts.append(block)
    if caption:
        parts.append(Text(caption, style="dim italic"))
    return Group(*parts)
