"""How every command ends: ``finish(report, output)`` writes JUnit, the document or the rendering,
says the notes, and exits with the report's code."""

from __future__ import annotations

from dataclasses import replace

import typer

from mambaxfer_cli.cli.options import STDOUT, Format, OutputArgs, dump, stamped, write_output
from mambaxfer_cli.cli.outcome import keep_exit_code, red_line, said
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import EXIT_OK, EXIT_USAGE
from mambaxfer_cli.render.report import AsIs, Report, Viewed

__all__ = ["AsIs", "Report", "Viewed", "finish"]


def finish(report: Report, output: OutputArgs | None = None) -> None:
    """Say the report and exit with its code. A JUnit file that cannot be written is said after
    the report, whose verdict it must not hide: a pass then exits 2, a failure keeps its code."""
    code = report.exit_code
    keep_exit_code(code)
    output = output or OutputArgs()
    if output.output == STDOUT:     # '--output -': the document as --format json/yaml prints it
        output = replace(output, fmt=output.document_format(), output=None)
    unwritten = None
    if output.junit is not None:
        try:
            write_output(output.junit, report.junit(), flag="--junit")
        except UserError as exc:
            unwritten = exc
    if output.output is not None:
        write_output(output.output, dump(stamped(report.to_dict()), output.document_format()))
        for line in report.written(output.output):
            said(line)
    elif output.fmt is not Format.table:
        typer.echo(dump(stamped(report.to_dict()), output.fmt), nl=False)
    else:
        from mambaxfer_cli.render.console import console, fit_all

        out = console()
        parts = list(report.render(out.width))
        if all(isinstance(part, str) for part in parts):     # text as it is (a schema)
            typer.echo("".join(parts), nl=False)
        else:
            fitted = iter(fit_all([part for part in parts if not isinstance(part, AsIs)], out))
            for part in parts:
                out.print(part.part if isinstance(part, AsIs) else next(fitted))
    for line in report.notes():
        said(line)
    if unwritten is not None:
        red_line(str(unwritten))
        raise typer.Exit(code or EXIT_USAGE)
    if code != EXIT_OK:
        raise typer.Exit(code)
