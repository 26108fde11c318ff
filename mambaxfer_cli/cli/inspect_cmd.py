"""``mambaxfer inspect``: every rank's state layout for one or more TP sizes."""

from __future__ import annotations

from typing import Annotated

import typer

from mambaxfer_cli.cli import app, verdict
from mambaxfer_cli.cli.options import (
    ConvDtypeOpt, EngineOption, Format, ModelOpt, NumSpecOpt, OutputOption, SsmDtypeOpt, VariantOpt, dump, load,
    parse_tp_list, stamped,
)


@app.command("inspect")
def inspect(
    model: ModelOpt,
    tp: Annotated[str, EngineOption("--tp", help="TP sizes, comma-separated, e.g. 1,2,4,8.")] = "1",
    fmt: Annotated[Format, OutputOption("--format", "-f", help="table, json or yaml.")] = Format.table,
    variant: VariantOpt = None,
    conv_dtype: ConvDtypeOpt = None,
    ssm_dtype: SsmDtypeOpt = None,
    num_spec: NumSpecOpt = None,
) -> None:
    """Show each rank's sub-projection dims, shards, byte offsets and sizes for the given TP sizes.

    [bold]Examples[/]

    mambaxfer inspect --model nemotron-h-8b --tp 1,2,4

    mambaxfer inspect --model ./my-model/config.json --tp 8 --format json
    """
    from mambaxfer_cli.layout import engine_layouts

    spec = load(model, variant, conv_dtype, ssm_dtype, num_spec)
    layouts = {size: engine_layouts(spec, size) for size in parse_tp_list(tp)}
    verdict(0)
    if fmt is not Format.table:
        document = {"schema": "mambaxfer.inspect/v1", "model": spec.to_dict(),
                    "layouts": {str(size): [r.to_dict() for r in ranks] for size, ranks in layouts.items()}}
        typer.echo(dump(stamped(document), fmt), nl=False)
        return
    from mambaxfer_cli.render.console import console, fit
    from mambaxfer_cli.render.model_view import layout_table, model_summary

    out = console()
    out.print(model_summary(spec))
    for size, ranks in layouts.items():
        out.print(fit(layout_table(f"TP {size}", ranks)))
