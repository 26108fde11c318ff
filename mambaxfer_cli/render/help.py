"""``--help`` that never cuts an option name, a type or a default, at any terminal width.

typer's own options panel is a five-column table that rich shrinks to the terminal by cutting
cells (``--p-attention-back…``). Ours has two columns, names (with the type) and help, when the
names fit beside at least ``MIN_HELP`` columns of help; else each option's names on their own
lines with its help indented below. Names are never wrapped; help wraps between words.
"""

from __future__ import annotations

MIN_HELP = 28      # the narrowest help column worth reading beside the names
INDENT = 4         # help under the names, in the stacked form


def _help_text(param, ctx, markup_mode):
    """The option's help, default and [required] as one Text (typer builds them as Columns,
    which rich lays out like 'ls' and cuts)."""
    from rich.text import Text
    from typer import rich_utils

    built = rich_utils._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode)
    items = getattr(built, "renderables", [built])
    text = Text(overflow="fold")
    for item in items:
        if not isinstance(item, Text):
            item = Text(str(item))
        if text.plain:
            text.append(" ")
        text.append_text(item)
    return text


def _names(param, ctx) -> list[str]:
    """The option's names, one line each: the long names and short ones, then the type; the
    negative names of a --flag/--no-flag pair on a line of their own."""
    first = ", ".join([*(o for o in param.opts if o.startswith("--")),
                       *(o for o in param.opts if not o.startswith("--"))])
    kind = param.display_type_rich(ctx=ctx) if hasattr(param, "display_type_rich") else None
    if kind:
        first += f" {kind}"
    return [first, *param.secondary_opts]


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


def options_panel(*, name: str, params, ctx, markup_mode, console) -> None:
    """Print one panel of options (typer's ``_print_options_panel``, laid out to never cut)."""
    from rich.cells import cell_len
    from rich.console import Group
    from rich.padding import Padding
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text
    from typer import rich_utils

    if not params:
        return
    rows = []
    for param in params:
        names = Text("\n".join(_names(param, ctx)), style="bold cyan", no_wrap=True, overflow="fold")
        if param.required:
            names.append(" *", style="bold red")
        rows.append((names, _help_text(param, ctx, markup_mode)))
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
    console.print(Panel(body, title=name, title_align="left",
                        border_style=getattr(rich_utils, "STYLE_OPTIONS_PANEL_BORDER", "dim")))


def paragraphs(text: str) -> str:
    """A docstring's paragraphs each on one line, for the terminal to wrap (typer's rich mode keeps
    the source's line breaks after the first paragraph, which then end lines mid-sentence)."""
    import inspect

    return "\n\n".join(part if part.startswith("\b") else " ".join(part.split("\n"))
                        for part in inspect.cleandoc(text).split("\n\n"))


def install_help() -> None:
    """Use ``options_panel`` for every command's --help, and one line per paragraph of its help
    (where typer lays its help out as we know)."""
    from typer import rich_utils

    if hasattr(rich_utils, "_print_options_panel") and hasattr(rich_utils, "_get_parameter_help"):
        rich_utils._print_options_panel = options_panel
    help_text = getattr(rich_utils, "_get_help_text", None)
    if help_text is not None and not getattr(help_text, "joined", False):
        def joined(*, obj, markup_mode):
            original = obj.help
            obj.help = paragraphs(original) if original else original
            try:
                return help_text(obj=obj, markup_mode=markup_mode)
            finally:
                obj.help = original

        joined.joined = True  # type: ignore[attr-defined]  # marks the wrapper: installed once
        rich_utils._get_help_text = joined
