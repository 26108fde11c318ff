"""``mambaxfer schema``: the JSON Schema of the plan document."""

from __future__ import annotations

import typer

from mambaxfer_cli.cli import app, verdict


@app.command("schema")
def schema() -> None:
    """Print the JSON Schema (draft 2020-12) of the mambaxfer.plan/v1 document."""
    from mambaxfer_cli.schema import PLAN_SCHEMA_PATH

    typer.echo(PLAN_SCHEMA_PATH.read_text(), nl=False)
