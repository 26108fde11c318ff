"""``mambaxfer inspect``: every rank's state layout for one or more TP sizes."""

from __future__ import annotations

from mambaxfer_cli.cli.options import EngineArgs, ModelArgs, OutputArgs
from mambaxfer_cli.cli.params import ENGINES, command, option
from mambaxfer_cli.cli.report import finish
from mambaxfer_cli.engines import one


@command(uses={"model": ModelArgs.without("all_presets"),
               "engines": EngineArgs.given(*EngineArgs.ONE_ENGINE),
               "output": OutputArgs.given("fmt")}, required=("model",))
def inspect(
    model: ModelArgs,
    engines: EngineArgs,
    output: OutputArgs,
    tp: str = option("--tp", help="TP sizes, comma-separated, e.g. 1,2,4,8.", panel=ENGINES, default="1"),
) -> None:
    """Show each rank's sub-projection dims, shards, byte offsets and sizes for the given TP sizes,
    and what the engine derives for each TP size: vLLM's block geometry on the GPU, SGLang's state
    shapes per slot.

    With --engine sglang: the same layouts, and SGLang's state shapes per slot.

    [bold]Examples[/]

    mambaxfer inspect --model nemotron-h-8b --tp 1,2,4

    mambaxfer inspect --model ./my-model/config.json --tp 8 --format json
    """
    finish(one(engines.engine).inspect(model, engines, tp), output)
