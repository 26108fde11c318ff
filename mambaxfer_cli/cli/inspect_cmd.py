"""``mambaxfer inspect``: every rank's state layout for one or more TP sizes."""

from __future__ import annotations

from mambaxfer_cli.cli.options import EngineArgs, ModelArgs, OutputArgs, parse_tp_list
from mambaxfer_cli.cli.params import ENGINES, command, option
from mambaxfer_cli.cli.report import AsIs, Report, finish


@command(uses={"model": ModelArgs.without("all_presets"), "engines": EngineArgs.given(*EngineArgs.SHARED),
               "output": OutputArgs.given("fmt")}, required=("model",))
def inspect(
    model: ModelArgs,
    engines: EngineArgs,
    output: OutputArgs,
    tp: str = option("--tp", help="TP sizes, comma-separated, e.g. 1,2,4,8.", panel=ENGINES, default="1"),
) -> None:
    """Show each rank's sub-projection dims, shards, byte offsets and sizes for the given TP sizes,
    and the block geometry the vLLM release derives for an engine of each TP size on the GPU.

    With --engine sglang: the same layouts, and SGLang's state shapes per slot.

    [bold]Examples[/]

    mambaxfer inspect --model nemotron-h-8b --tp 1,2,4

    mambaxfer inspect --model ./my-model/config.json --tp 8 --format json
    """
    if engines.engine.strip().lower() == "sglang":
        from mambaxfer_cli.engines.sglang.commands import answers as sglang

        finish(sglang.inspect_report(model, engines, parse_tp_list(tp)), output)
        return

    from mambaxfer_cli.engines.vllm.engine import engine_layout
    from mambaxfer_cli.planning.kv_groups import model_grouping

    flags = engines.build().decode
    spec = model.load(releases=(flags.release.name,))
    grouping = model_grouping(spec)
    sides = {size: engine_layout(spec, size, flags, grouping) for size in parse_tp_list(tp)}
    document = {"schema": "mambaxfer.inspect/v1", "vllm_version": flags.release.name, "gpu": flags.gpu.spec,
                "model": spec.to_dict(),
                "layouts": {str(size): [r.to_dict() for r in side.ranks] for size, side in sides.items()},
                "engines": {str(size): side.geometry.to_dict() for size, side in sides.items()}}
    finish(InspectReport(document, spec, flags, sides), output)


class InspectReport(Report):
    def __init__(self, document: dict, spec, flags, sides: dict) -> None:
        super().__init__(document)
        self.spec, self.flags, self.sides = spec, flags, sides

    def render(self, width: int) -> list:
        from mambaxfer_cli.render.console import together
        from mambaxfer_cli.render.model_view import layout_table, model_summary
        from mambaxfer_cli.engines.vllm.views.model import engine_header, geometry_line

        tables = together([layout_table(f"TP {size}", side.ranks) for size, side in self.sides.items()], "layouts")
        parts = [AsIs(model_summary(self.spec)), AsIs(engine_header(self.flags))]
        for size, table in zip(self.sides, tables):
            parts += [table, AsIs(geometry_line(f"engine at TP {size}:", self.sides[size]))]
            from mambaxfer_cli.engines.vllm.views.model import side_caches_line
            line = side_caches_line(self.spec, self.sides[size])
            if line:
                parts.append(AsIs(line))
        return parts
