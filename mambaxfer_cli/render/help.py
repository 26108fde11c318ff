"""``--help``, laid out with rich from click's public description of a command, at any width
without cutting an option name, a type or a default.

The usage line; the command's help (its docstring, each paragraph on one line for the terminal to
wrap, rich markup allowed); one panel per group of options (``Option.panel``: Arguments, Options,
then the groups in their order), each with two columns, names (with the type) and help, when the
names fit beside at least ``MIN_HELP`` columns of help, else each option's names on their own
lines with its help indented below; the commands of a group; the epilog. Names are never
wrapped; help wraps between words.
"""

from __future__ import annotations

import inspect
from typing import Any

import click

MIN_HELP = 28      # the narrowest help column worth reading beside the names
INDENT = 4         # help under the names, in the stacked form
BORDER = "dim"


def paragraphs(text: str) -> str:
    """A docstring's paragraphs each on one line, for the terminal to wrap."""
    return "\n\n".join(part if part.startswith("\b") else " ".join(part.split("\n"))
                       for part in inspect.cleandoc(text).split("\n\n"))


def _kind(param: click.Parameter, ctx: click.Context) -> str | None:
    """The value an option takes, as ``<int>``, ``<a|b>`` or its metavar; None for a flag."""
    if isinstance(param, click.Option) and param.is_flag:
        return None
    metavar = getattr(param, "metavar", None)
    if metavar:
        return metavar
    choices = getattr(param.type, "choices", None)
    if choices:
        return "<" + "|".join(str(getattr(c, "value", c)) for c in choices) + ">"
    name = {"text": "str", "integer": "int", "float": "float", "path": "path", "boolean": "bool"}.get(
        param.type.name.lower(), param.type.name.lower())
    return f"<{name}>"


def _names(param: click.Parameter, ctx: click.Context) -> list[str]:
    """The option's names, one line each: the long names and short ones, then the type; the
    negative names of a --flag/--no-flag pair on a line of their own."""
    if isinstance(param, click.Argument):
        first = param.name or ""
    else:
        first = ", ".join([*(o for o in param.opts if o.startswith("--")),
                           *(o for o in param.opts if not o.startswith("--"))])
    kind = _kind(param, ctx)
    if kind:
        first += f" {kind}"
    return [first, *param.secondary_opts]


def _default(param: click.Parameter) -> str | None:
    if not getattr(param, "show_default", False):
        return None
    default = param.default
    if default is None:
        return None
    if isinstance(param, click.Option) and param.is_flag and param.secondary_opts:
        names = param.opts if default else param.secondary_opts
        return names[0].lstrip("-")
    return str(getattr(default, "value", default))


def _help_text(param: click.Parameter):
    from rich.text import Text

    text = Text.from_markup(getattr(param, "help", None) or "", overflow="fold")
    shown = _default(param)
    if shown is not None:
        text.append(f"{' ' if text.plain else ''}[default: {shown}]", style="dim")
    if param.required:
        text.append(f"{' ' if text.plain else ''}[required]", style="dim red")
    return text


def _default_whole(text, width: int, console):
    """The help with its ``[default: ...]`` on a line of its own where wrapping would split it."""
    at = text.plain.rfind("[default: ")
    if at <= 0 or width < 1:
        return text
    lines = text.wrap(console, width)
    if any(line.plain.rstrip().endswith("[default:") for line in lines):
        head, tail = text[:at], text[at:]
        head.rstrip()
        head.append("\n")
        head.append_text(tail)
        return head
    return text


def _panel(name: str, rows: list[tuple[Any, Any]], console) -> None:
    """One panel of two columns, names and help, laid out to never cut a name."""
    from rich.cells import cell_len
    from rich.console import Group
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.table import Table

    inner = console.width - 4                      # the panel's borders and padding
    names_width = max(cell_len(line) for names, _ in rows for line in names.plain.splitlines())
    beside = inner - names_width - 2 >= MIN_HELP
    width = inner - names_width - 2 if beside else inner - INDENT
    rows = [(names, _default_whole(help_text, width, console)) for names, help_text in rows]
    body: Table | Group
    if beside:
        table = Table(show_header=False, box=None, padding=(0, 2, 0, 0), expand=True, pad_edge=False)
        table.add_column(width=names_width, no_wrap=True)
        table.add_column(ratio=1, overflow="fold")
        for names, help_text in rows:
            table.add_row(names, help_text)
        body = table
    else:
        body = Group(*[part for names, help_text in rows
                       for part in (names, Padding(help_text, (0, 0, 0, INDENT)))])
    console.print(Panel(body, title=name, title_align="left", border_style=BORDER))


def _param_rows(params: list[click.Parameter], ctx: click.Context) -> list[tuple[Any, Any]]:
    from rich.text import Text

    rows = []
    for param in params:
        names = Text("\n".join(_names(param, ctx)), style="bold cyan", no_wrap=True, overflow="fold")
        if param.required:
            names.append(" *", style="bold red")
        rows.append((names, _help_text(param)))
    return rows


def show_help(command: click.Command, ctx: click.Context, commands: list[tuple[str, str]] | None = None) -> None:
    """Print ``command``'s help on stdout; ``commands``: a group's commands and their summaries."""
    from rich.padding import Padding
    from rich.text import Text

    from mambaxfer_cli.render.console import console

    out = console()
    pieces = " ".join(command.collect_usage_pieces(ctx))
    usage = Text.assemble(("Usage: ", "yellow"), (f"{ctx.command_path} {pieces}".rstrip(), "bold"))
    out.print(Padding(usage, 1))
    if command.help:
        body = paragraphs(command.help).split("\n\n")
        text = Text.from_markup(body[0])
        for part in body[1:]:
            text.append("\n\n")
            text.append_text(Text.from_markup(part.lstrip("\b\n"), style="dim"))
        out.print(Padding(text, (0, 1, 1, 1)))
    panels: dict[str, list[click.Parameter]] = {"Arguments": [], "Options": []}
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        panels.setdefault(getattr(param, "panel", "Options"), []).append(param)
    help_option = command.get_help_option(ctx)
    if help_option is not None and help_option in panels["Options"]:   # --help closes the first panel
        panels["Options"].remove(help_option)
        panels["Options"].append(help_option)
    for name, params in panels.items():
        if params:
            _panel(name, _param_rows(params, ctx), out)
    if commands:
        rows = [(Text(name, style="bold cyan", no_wrap=True), Text(summary)) for name, summary in commands]
        _panel("Commands", rows, out)
    if command.epilog:
        out.print(Padding(Text(paragraphs(command.epilog)), 1))
