"""``mambaxfer schema``: the JSON Schema of each document the tool emits."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from mambaxfer_cli.cli.outcome import keep_exit_code
from mambaxfer_cli.exits import EXIT_OK
from mambaxfer_cli.schema import DOCUMENTS

# Its members are DOCUMENTS' names, which mypy cannot read from a functional Enum call.
Document = Enum("Document", {name: name for name in DOCUMENTS}, type=str)  # type: ignore[misc]


def schema(
    document: Annotated[Document, typer.Argument(
        help="Which document: plan (plan --format json/--output), check, execute, inspect, models, "
             "preflight, bench or conformance (their --format json).", case_sensitive=False,
        show_default=True)] = Document["plan"],
) -> None:
    """Print the JSON Schema (draft 2020-12) of a document mambaxfer emits (mambaxfer.NAME/v1).

    [bold]Examples[/]

    mambaxfer schema > plan-v1.schema.json

    mambaxfer schema check
    """
    from mambaxfer_cli.schema import schema_text

    keep_exit_code(EXIT_OK)
    typer.echo(schema_text(document.value), nl=False)
