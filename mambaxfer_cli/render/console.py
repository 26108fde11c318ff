"""The one rich console the commands print through, and its rule: a value is never cut (a table too
wide gets widths that keep each value whole, else goes vertical; prose wraps between words)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence, TypeVar

if TYPE_CHECKING:
    from rich.console import JustifyMethod
    from rich.table import Table

VALUE_CHARS = 40      # a cell line up to this long is one value, never wrapped
# Values of several words that prose never splits: a number and its unit, a pairing, a shard, an
# ID run, an option and its number.
KEEP = re.compile(r"\d+(?:\.\d+)? (?:B|KiB|MiB|GiB|GB/s|s|ms|µs|tokens|bytes)(?![\w/])"
                  r"|P TP \d+ → D TP \d+|P\d+ → D\d+|P TP \d+|D TP \d+|vLLM \d+\.\d+|\[\d+, \d+\)|\d+\.\.\d+ step \d+"
                  r"|--[\w-]+ \d+(?![\w.])")


def tp_pairing(p_tp: object, d_tp: object) -> str:
    """A pairing as every answer writes it, ``P TP 1 → D TP 2`` (``1P2D`` reads as instance counts)."""
    return f"P TP {p_tp} → D TP {d_tp}"


@lru_cache(maxsize=None)
def console():
    from rich.console import Console

    # The terminal's width; through a pipe (``| less``, a CI log) COLUMNS, else 80.
    return Console(highlight=False)


def columns_table(title: str, columns: Sequence[tuple[str, JustifyMethod]], no_wrap: bool = False,
                  **table: Any) -> Table:
    """A table titled on the left (its caption too), with these (name, justify) columns."""
    from rich.table import Table

    out = Table(title=title, title_justify="left", caption_justify="left", **table)
    for column, justify in columns:
        out.add_column(column, justify=justify, no_wrap=no_wrap)
    return out


Row = TypeVar("Row")


def model_rows(table: Table, rows: Iterable[Row], model: Callable[[Row], str]) -> Iterator[tuple[str, Row]]:
    """Each row with its model named on the model's first row only, and a section between models."""
    last = None
    for row in rows:
        name = model(row)
        if last is not None and name != last:
            table.add_section()
        yield ("" if name == last else name), row
        last = name


def together(tables: Sequence, name: str) -> Sequence:
    """Mark tables to be laid out alike by ``fit_all`` (all as tables, or all vertically)."""
    for table in tables:
        table.fit_group = name
    return tables


def fit_all(parts: Iterable, out=None) -> list:
    """Every part as it can be printed whole; tables of one ``together`` group alike; text as ``Prose``."""
    from rich.table import Table

    out = out or console()
    parts = [_prose(part) for part in parts]
    groups: dict[object, list[int]] = {}
    for i, part in enumerate(parts):
        if isinstance(part, Table):
            groups.setdefault(getattr(part, "fit_group", None) or i, []).append(i)
    for members in groups.values():
        widths = [column_widths(parts[i], out.width) for i in members]
        if any(w is None for w in widths):
            for i in members:
                parts[i] = _prose(vertical(parts[i], out.width))
            continue
        for i, chosen in zip(members, widths):
            if chosen:
                for column, width in zip(parts[i].columns, chosen):
                    column.width, column.no_wrap = width, False
    return [_apart(part, out) for part in parts]


def _apart(part, out):
    """A table's caption as Prose below it, and a title wider than the table above it (rich would
    wrap them at the table's width, the caption anywhere)."""
    from rich.console import Group
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    if isinstance(part, Table) and part.caption:
        caption = part.caption if isinstance(part.caption, Text) else Text(str(part.caption))
        part.caption = None
        part = Group(part, Prose(Text(caption.plain, style="dim")))
    table = part.renderables[0] if isinstance(part, Group) and part.renderables else part
    if not isinstance(table, Table) or not table.title:
        return part
    title = table.title if isinstance(table.title, Text) else Text.from_markup(str(table.title))
    if title.cell_len <= Measurement.get(out, out.options, table).maximum:
        return part
    table.title = None
    return Group(Prose(Text(title.plain, style="italic")), part)


def _prose(part):
    """Text, and text inside panels and groups, as Prose."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    if isinstance(part, str):
        return Prose(Text.from_markup(part))
    if isinstance(part, Text):
        return Prose(part)
    if isinstance(part, Panel):
        part.renderable = _prose(part.renderable)
    elif isinstance(part, Group):
        part.renderables[:] = [_prose(item) for item in part.renderables]
    return part


class Prose:
    """Text that wraps between words, never inside a value (``KEEP``) nor a word shorter than the line."""

    def __init__(self, text, keep: re.Pattern | None = None) -> None:
        self.text = text
        self.keep = keep        # more values to keep whole, besides KEEP's

    def _words(self, line: str) -> list[tuple[int, int]]:
        """(start, end) of each unbreakable piece of one line."""
        kept = [m.span() for pattern in (KEEP, self.keep) if pattern for m in pattern.finditer(line)]
        pieces: list[tuple[int, int]] = []
        for m in re.finditer(r"\S+", line):
            start, end = m.span()
            for a, b in kept:
                if a < end and start < b:      # a kept value overlaps: the piece spans it whole
                    start, end = min(start, a), max(end, b)
            if pieces and start < pieces[-1][1]:
                pieces[-1] = (pieces[-1][0], max(pieces[-1][1], end))
            else:
                pieces.append((start, end))
        return pieces

    def _lines(self, width: int) -> list:
        from rich.cells import cell_len

        out, at = [], 0
        for line in self.text.plain.split("\n"):
            text = self.text[at:at + len(line)]
            at += len(line) + 1
            start, last_end = 0, 0      # a line's leading spaces are kept, a wrapped line's dropped
            pieces = self._words(line)
            if not pieces:
                out.append(text)
                continue
            for a, b in pieces:
                if last_end and cell_len(line[start:b]) > width:
                    out.append(text[start:last_end])
                    start = a
                last_end = b
            out.append(text[start:last_end])
        return out

    def __rich_console__(self, console, options):
        from rich.text import Text

        lines = self._lines(options.max_width)
        for line in lines:
            line.no_wrap, line.overflow, line.end = True, "fold", "\n"
        joined = Text("\n").join(lines)
        joined.no_wrap, joined.overflow, joined.end = True, "fold", self.text.end
        if any(line.cell_len > options.max_width for line in lines):
            # a piece longer than the line (a long path): rich folds it, never cuts it
            joined.no_wrap = False
        yield joined

    def __rich_measure__(self, console, options):
        from rich.cells import cell_len
        from rich.measure import Measurement

        plain = self.text.plain
        lines = plain.split("\n")
        widest = max(cell_len(line) for line in lines)
        piece = max((cell_len(line[a:b]) for line in lines for a, b in self._words(line)), default=0)
        return Measurement(min(piece, options.max_width), min(widest, options.max_width))


def _plain(cell) -> str:
    from rich.text import Text

    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        return Text.from_markup(cell).plain
    return str(cell)


def _words(text: str) -> int:
    return max((len(word) for word in text.split()), default=0)


def _narrowest(text: str) -> int:
    """The narrowest a cell can be: a value's whole line, else (prose) its longest word."""
    from rich.cells import cell_len

    lines = text.splitlines() or [""]
    return max(cell_len(line) if cell_len(line) <= VALUE_CHARS else _words(line) for line in lines)


# A measured time or rate, alone in a cell: its digits vary from run to run.
_TIME = re.compile(r"^\d{1,2}(\.\d\d (?:ms|s|µs))$")
_RATE = re.compile(r"^\d(\.\d\d)$")


def _room(cell: str) -> str:
    """A measured cell at its widest on any run, so that the layout does not depend on the machine."""
    for pattern, digits in ((_TIME, "999"), (_RATE, "99")):
        m = pattern.match(cell)
        if m:
            return digits + m.group(1)
    return cell


def column_widths(table, width: int) -> list[int] | None:
    """[] when rich's own layout fits ``width``; else widths that keep every value whole; None
    when no widths do (the table must go vertical)."""
    from rich.cells import cell_len

    for column in table.columns:
        column.overflow = "fold"   # never an ellipsis, even where a cell must give way
    need, want = [], []
    for column in table.columns:
        header = _plain(column.header)
        cells = [_room(_plain(cell)) for cell in column.cells]
        need.append(max([_words(header), *map(_narrowest, cells)]))
        want.append(max([cell_len(line) for text in (header, *cells) for line in (text.splitlines() or [""])]))
    extra = _chrome(table)
    room = width - extra
    if sum(want) <= room:
        return []
    if sum(need) > room:
        return None
    # Every column gets what it needs; the room left goes to those that want more, in proportion.
    spare, slack = room - sum(need), [w - n for w, n in zip(want, need)]
    total = sum(slack)
    return [n + (s * spare // total if total else 0) for n, s in zip(need, slack)]


def _chrome(table) -> int:
    """The columns a table takes besides its cells: its borders and each column's padding."""
    borders = (2 if table.box and table.show_edge else 0) + (len(table.columns) - 1 if table.box else 0)
    _, right, _, left = table.padding
    padding = sum(right + (max(0, left - right) if table.collapse_padding and i else left)
                  for i in range(len(table.columns)))
    return borders + padding


def vertical(table, width: int | None = None):
    """The table's rows as lines: the first column's value as a heading, then ``column: value``
    pairs packed into lines of at most ``width``."""
    from rich.cells import cell_len
    from rich.console import Group
    from rich.text import Text

    width = width or console().width
    headers = [_plain(c.header) for c in table.columns]
    cells = [list(c.cells) for c in table.columns]
    lines = []
    if table.title:
        lines.append(Text(_plain(table.title), style="bold"))
    for row in zip(*cells):
        values = [cell.copy() if isinstance(cell, Text) else Text(_plain(cell)) for cell in row]
        values = [Text("; ").join(value.split("\n")) if "\n" in value.plain else value for value in values]
        if values[0].plain:
            lines.append(Text.assemble((headers[0] + ": " if headers[0] else "", "bold"), values[0]))
        line = Text("  ")
        for k, value in enumerate(values):
            if not k or not value.plain:
                continue
            label = headers[k] + ": " if headers[k] else ""      # a mark column: the mark alone
            pair = Text.assemble((label, "dim"), value)
            if line.plain.strip() and cell_len(line.plain) + 3 + cell_len(pair.plain) > width:
                lines.append(line)
                line = Text("  ")
            line.append_text(Text(" · ") if line.plain.strip() else Text(""))
            line.append_text(pair)
        if line.plain.strip():
            lines.append(line)
    if table.caption:
        lines.append(Text(_plain(table.caption), style="dim"))
    return Group(*lines)
