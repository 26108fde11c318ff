"""How a command that reaches a verdict ends: JUnit file, the report (rich or a document), exit code."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

import typer

from mambaxfer_cli.cli.outcome import red_line, keep_exit_code
from mambaxfer_cli.cli.options import Format, dump, stamped, write_output
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import EXIT_USAGE


def finish(code: int, document: dict, fmt: Format, parts: Callable[[], Iterable],
           junit: Path | None = None, junit_text: Callable[[], str] | None = None) -> None:
    """Say the verdict and exit with ``code``. A JUnit file that cannot be written is said after
    the report, whose verdict it must not hide: a pass then exits 2, a failure keeps its code."""
    keep_exit_code(code)
    unwritten = None
    if junit is not None:
        assert junit_text is not None, "a command that takes --junit says what the file holds"
        try:
            write_output(junit, junit_text(), flag="--junit")
        except UserError as exc:
            unwritten = exc
    if fmt is not Format.table:
        typer.echo(dump(stamped(document), fmt), nl=False)
    else:
        from mambaxfer_cli.render.console import console, fit_all

        out = console()
        for part in fit_all(parts(), out):
            out.print(part)
    if unwritten is not None:
        red_line(str(unwritten))
        raise typer.Exit(code or EXIT_USAGE)
    raise typer.Exit(code)
