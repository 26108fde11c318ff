"""The ``mambaxfer`` command line: thin typer commands that parse, delegate and render."""

from __future__ import annotations

import sys

import typer

from mambaxfer_cli.errors import UserError

app = typer.Typer(
    name="mambaxfer",
    help="Plan, check and execute P/D transfers of Mamba-family state (vLLM NIXL connector).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode="rich",
)

# Each module registers its command on ``app``.
from mambaxfer_cli.cli import models_cmd, inspect_cmd, plan_cmd, schema_cmd  # noqa: E402,F401
from mambaxfer_cli.cli import check_cmd, execute_cmd  # noqa: E402,F401
from mambaxfer_cli.cli import preflight_cmd  # noqa: E402,F401


def fail(message: str) -> "typer.Exit":
    """Print one red line on stderr; the caller raises the returned Exit (code 2)."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(2)


def main() -> None:
    try:
        app()
    except UserError as exc:
        raise SystemExit(fail(str(exc)).exit_code) from None
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None
