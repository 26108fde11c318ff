"""``mambaxfer models``: the built-in presets."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mambaxfer_cli.cli.options import EngineArgs, OutputArgs
from mambaxfer_cli.cli.params import command
from mambaxfer_cli.cli.report import Report, finish

if TYPE_CHECKING:
    from mambaxfer_cli.readers.model_config import Startup


@command(uses={"engines": EngineArgs.given("engine"), "output": OutputArgs.given("fmt")})
def models(engines: EngineArgs, output: OutputArgs) -> None:
    """List the built-in model presets with their variant, layer counts, dtypes and source.

    With --engine: what that engine serves of them, and why not the rest (--engine sglang: SGLang's
    model registry and the model families whose state it keeps).

    [bold]Examples[/]

    mambaxfer models

    mambaxfer models --format json

    mambaxfer models --engine sglang
    """
    from mambaxfer_cli.engines import one

    finish(one(engines.engine).models(), output)     # without --engine: the default engine's


def presets_report(startup: Startup | None = None) -> Report:
    """The built-in presets as mambaxfer reads them, with an engine's dtype ``startup`` rules."""
    from mambaxfer_cli.readers.model_source import load_model, preset_description, preset_names

    # Read as no engine starts them: a preset only one engine serves is listed too.
    specs = [load_model(name, startup=startup) for name in preset_names()]
    rows = [{**spec.to_dict(), "family": spec.family, "description": preset_description(spec.name)}
            for spec in specs]
    return ModelsReport({"schema": "mambaxfer.models/v1", "models": rows}, specs)


class ModelsReport(Report):
    def __init__(self, document: dict, specs: list) -> None:
        super().__init__(document)
        self.specs = specs

    def render(self, width: int) -> list:
        from mambaxfer_cli.render.model_view import models_table

        return [models_table(self.specs)]
