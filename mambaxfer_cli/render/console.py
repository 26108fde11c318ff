"""The one rich console the commands print through."""

from __future__ import annotations

import os
import sys
from functools import lru_cache

PIPE_WIDTH = 120


@lru_cache(maxsize=None)
def console():
    from rich.console import Console

    # Piped output (CI logs, bug reports) gets a width that fits the tables, not rich's 80.
    width = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH
    return Console(highlight=False, width=width)



def fit(part, out=None):
    """A table as rich would print it when it fits the console; else the same rows laid out
    vertically (one heading per row, then 'column: value' pairs), because rich would otherwise
    cut values to 'granit…' or '2621…', and a user must be able to copy every value whole."""
    from rich.table import Table

    if not isinstance(part, Table):
        return part
    out = out or console()
    for column in part.columns:
        column.overflow = "fold"   # never an ellipsis, even where a cell must give way
    if _narrowest(part) <= out.width:
        return part
    return vertical(part)


def _narrowest(table) -> int:
    """The narrowest the table can be with every word whole (a word is never folded)."""
    from rich.text import Text

    def words(cell) -> int:
        text = cell.plain if isinstance(cell, Text) else str(cell)
        return max((len(word) for word in text.split()), default=0)

    columns = [max([words(column.header), *map(words, column.cells)]) for column in table.columns]
    left, right = table.padding[3], table.padding[1]
    edges = (len(columns) + 1) if table.box else 0
    return sum(columns) + len(columns) * (left + right) + edges


def vertical(table):
    from rich.console import Group
    from rich.text import Text

    headers = [Text.from_markup(c.header) if isinstance(c.header, str) else c.header for c in table.columns]
    cells = [list(c.cells) for c in table.columns]
    lines = []
    if table.title:
        lines.append(Text(str(table.title), style="bold"))
    for row in zip(*cells):
        values = [cell if isinstance(cell, Text) else Text(str(cell)) for cell in row]
        if values[0].plain:
            lines.append(Text.assemble((headers[0].plain + ": ", "bold"), values[0]))
        pairs = [Text.assemble("  " if not i else " · ", (headers[k].plain + ": ", "dim"), value)
                 for i, (k, value) in enumerate((k, v) for k, v in enumerate(values) if k and v.plain)]
        if pairs:
            lines.append(Text.assemble(*pairs))
    if table.caption:
        lines.append(Text(str(table.caption), style="dim"))
    return Group(*lines)
