"""``mambaxfer schema``: the JSON Schema of a document mambaxfer emits."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from mambaxfer_cli.cli import app
from mambaxfer_cli.schema import DOCUMENTS

Document = Enum("Document", {name: name for name in DOCUMENTS}, type=str)


@app.command("schema")
def schema(
    document: Annotated[Document, typer.Argument(
        help="Which document: plan (plan --format json) or preflight (preflight --format json).",
        case_sensitive=False)] = Document.plan,
) -> None:
    """Print the JSON Schema (draft 2020-12) of a mambaxfer document (mambaxfer.NAME/v1)."""
    from mambaxfer_cli.schema import schema_path

    typer.echo(schema_path(document.value).read_text(), nl=False)
