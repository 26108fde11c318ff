"""``mambaxfer preflight``: will two ``vllm serve`` engines work together as P and D?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mambaxfer_cli.cli import app
from mambaxfer_cli.cli.options import Format, dump, write_atomically
from mambaxfer_cli.errors import UserError


def _text(line: str | None, file: Path | None, side: str) -> str:
    if (line is None) == (file is None):
        raise UserError(f"give --{side} 'vllm serve ...' or --{side}-file FILE (one of them)")
    if line is not None:
        return line
    try:
        data = Path(file).read_bytes()
    except OSError as exc:
        raise UserError(f"--{side}-file {file}: cannot read: {exc.strerror}") from None
    if len(data) > 1 << 20:
        raise UserError(f"--{side}-file {file}: larger than 1 MiB; give the script that starts the engine")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"--{side}-file {file}: not UTF-8 text") from None


@app.command("preflight")
def preflight(
    prefill: Annotated[Optional[str], typer.Option(
        "--prefill", help="The prefill engine's command line: 'vllm serve MODEL ...'.", show_default=False)] = None,
    decode: Annotated[Optional[str], typer.Option(
        "--decode", help="The decode engine's command line: 'vllm serve MODEL ...'.", show_default=False)] = None,
    prefill_file: Annotated[Optional[Path], typer.Option(
        "--prefill-file", help="A file with P's command line, or a shell script that runs it.",
        show_default=False)] = None,
    decode_file: Annotated[Optional[Path], typer.Option(
        "--decode-file", help="A file with D's command line, or a shell script that runs it.",
        show_default=False)] = None,
    fmt: Annotated[Format, typer.Option(
        "--format", "-f", help="table, json or yaml (mambaxfer.preflight/v1).")] = Format.table,
    junit: Annotated[Optional[Path], typer.Option(
        "--junit", help="Also write the verdict as JUnit XML to FILE.", show_default=False)] = None,
) -> None:
    """Check a P/D deployment from its two vllm serve command lines: vLLM 0.33's verdict, a
    byte-level check of its reads, and the corrected command lines when anything fails.

    Exit code 0: the deployment works and moves the right bytes; 1: vLLM would refuse it or it
    corrupts state (explained); 2: a usage error.
    """
    from mambaxfer_cli.preflight import preflight as run
    from mambaxfer_cli.serve_args import parse_serve
    from mambaxfer_cli.serve_model import load_serve_model

    p_text = _text(prefill, prefill_file, "prefill")
    d_text = _text(decode, decode_file, "decode")
    p_line = parse_serve(p_text, "--prefill-file" if prefill is None else "--prefill")
    d_line = parse_serve(d_text, "--decode-file" if decode is None else "--decode")
    if junit is not None:   # fail before the work, not after it
        if junit.is_dir():
            raise UserError(f"--junit {junit}: is a directory")
        if not junit.parent.is_dir():
            raise UserError(f"--junit {junit}: directory {junit.parent} does not exist")
    report = run(p_line, d_line, load_serve_model)
    if junit is not None:
        from mambaxfer_cli.render.preflight_view import junit_xml

        write_atomically(junit, junit_xml(report), flag="--junit")
    if fmt is not Format.table:
        typer.echo(dump(report.to_dict(), fmt), nl=False)
    else:
        from mambaxfer_cli.render.console import console
        from mambaxfer_cli.render.preflight_view import render_report

        out = console()
        for part in render_report(report):
            out.print(part)
    raise typer.Exit(report.exit_code)
