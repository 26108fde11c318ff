"""``mambaxfer schema``: the JSON Schema of each document the tool emits."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from mambaxfer_cli.cli.outcome import keep_exit_code
from mambaxfer_cli.exits import EXIT_OK
from mambaxfer_cli.schema import DOCUMENTS

# Its members are DOCUMENTS' names, which mypy cannot read from a functional Enum call.
Document = Enum("Document", {name: name for name in DOCUMENTS}, type=str)  # type: ignore[misc]


def schema(
    document: Annotated[Optional[Document], typer.Argument(
        help="Which document: plan (plan --format json/--output), check, execute, inspect, models, "
             "preflight, bench or conformance (their --format json).", case_sensitive=False,
        show_default=False)] = None,
) -> None:
    """Print the JSON Schema (draft 2020-12) of a document mambaxfer emits (mambaxfer.NAME/v1).

    [bold]Examples[/]

    mambaxfer schema plan > plan-v1.schema.json

    mambaxfer schema check

    mambaxfer schema (no name) lists the documents.
    """
    from mambaxfer_cli.schema import schema_text

    keep_exit_code(EXIT_OK)
    if document is None:
        typer.echo("mambaxfer schema NAME prints one of these documents' JSON Schema:")
        for name in DOCUMENTS:
            typer.echo(f"  {name:<12} mambaxfer.{name}/v1")
        return
    typer.echo(schema_text(document.value), nl=False)
