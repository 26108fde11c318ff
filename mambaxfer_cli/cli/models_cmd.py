"""``mambaxfer models``: the built-in presets."""

from __future__ import annotations

from mambaxfer_cli.cli.options import OutputArgs
from mambaxfer_cli.cli.params import command
from mambaxfer_cli.cli.report import Report, finish


@command(uses={"output": OutputArgs.given("fmt")})
def models(output: OutputArgs) -> None:
    """List the built-in model presets with their variant, layer counts, dtypes and source.

    [bold]Examples[/]

    mambaxfer models

    mambaxfer models --format json
    """
    from mambaxfer_cli.readers.model_source import load_model, preset_description, preset_names

    specs = [load_model(name) for name in preset_names()]
    rows = [{**spec.to_dict(), "family": spec.family, "description": preset_description(spec.name)}
            for spec in specs]
    finish(ModelsReport({"schema": "mambaxfer.models/v1", "models": rows}, specs), output)


class ModelsReport(Report):
    def __init__(self, document: dict, specs: list) -> None:
        super().__init__(document)
        self.specs = specs

    def render(self, width: int) -> list:
        from mambaxfer_cli.render.model_view import models_table

        return [models_table(self.specs)]
