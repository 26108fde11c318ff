"""``mambaxfer models``: the built-in presets."""

from __future__ import annotations

from typing import Annotated

import typer

from mambaxfer_cli.cli.outcome import keep_exit_code
from mambaxfer_cli.exits import EXIT_OK
from mambaxfer_cli.cli.options import Format, OutputOption, dump, stamped


def models(
    fmt: Annotated[Format, OutputOption("--format", "-f", help="table, json or yaml.")] = Format.table,
) -> None:
    """List the built-in model presets with their variant, layer counts, dtypes and source.

    [bold]Examples[/]

    mambaxfer models

    mambaxfer models --format json
    """
    from mambaxfer_cli.readers.model_source import load_model, preset_description, preset_names

    specs = [load_model(name) for name in preset_names()]
    keep_exit_code(EXIT_OK)
    if fmt is not Format.table:
        rows = [{**spec.to_dict(), "family": spec.family, "description": preset_description(spec.name)}
                for spec in specs]
        typer.echo(dump(stamped({"schema": "mambaxfer.models/v1", "models": rows}), fmt), nl=False)
        return
    from mambaxfer_cli.render.model_view import models_table
    from mambaxfer_cli.render.console import console, fit

    console().print(fit(models_table(specs)))
