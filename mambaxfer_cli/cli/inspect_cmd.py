"""``mambaxfer inspect``: every rank's state layout for one or more TP sizes."""

from __future__ import annotations

from typing import Annotated

import typer

from mambaxfer_cli.cli.outcome import verdict
from mambaxfer_cli.cli.options import (
    BackendOpt, BlockSizeOpt, ConvDtypeOpt, EngineOption, Format, HeadSizeOpt, KvDtypeOpt, KvHeadsOpt, ModelOpt,
    NumSpecOpt, OutputOption, PrefixOpt, SsmDtypeOpt, VariantOpt, dump, load, parse_tp_list, stamped,
)


def inspect(
    model: ModelOpt,
    tp: Annotated[str, EngineOption("--tp", help="TP sizes, comma-separated, e.g. 1,2,4,8.")] = "1",
    fmt: Annotated[Format, OutputOption("--format", "-f", help="table, json or yaml.")] = Format.table,
    variant: VariantOpt = None,
    conv_dtype: ConvDtypeOpt = None,
    ssm_dtype: SsmDtypeOpt = None,
    num_spec: NumSpecOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_size: HeadSizeOpt = None,
    attention_backend: BackendOpt = "FLASH_ATTN",
    block_size: BlockSizeOpt = 16,
    kv_cache_dtype: KvDtypeOpt = "auto",
    enable_prefix_caching: PrefixOpt = True,
) -> None:
    """Show each rank's sub-projection dims, shards, byte offsets and sizes for the given TP sizes,
    and the block geometry vLLM 0.33 derives for an engine of each TP size.

    [bold]Examples[/]

    mambaxfer inspect --model nemotron-h-8b --tp 1,2,4

    mambaxfer inspect --model ./my-model/config.json --tp 8 --format json
    """
    from mambaxfer_cli.planning.engine import build_side
    from mambaxfer_cli.planning.geometry import EngineFlags
    from mambaxfer_cli.planning.kv_groups import vllm_grouping

    spec = load(model, variant, conv_dtype, ssm_dtype, num_spec, kv_heads, head_size)
    flags = EngineFlags(attention_backend=attention_backend, block_size=block_size, kv_cache_dtype=kv_cache_dtype,
                        prefix_caching=enable_prefix_caching)
    grouping = vllm_grouping(spec.layers)
    sides = {size: build_side(spec, size, flags, grouping) for size in parse_tp_list(tp)}
    layouts = {size: side.ranks for size, side in sides.items()}
    verdict(0)
    if fmt is not Format.table:
        document = {"schema": "mambaxfer.inspect/v1", "model": spec.to_dict(),
                    "layouts": {str(size): [r.to_dict() for r in ranks] for size, ranks in layouts.items()},
                    "engines": {str(size): side.geometry.to_dict() for size, side in sides.items()}}
        typer.echo(dump(stamped(document), fmt), nl=False)
        return
    from mambaxfer_cli.render.console import console, fit
    from mambaxfer_cli.render.model_view import layout_table, model_summary

    out = console()
    out.print(model_summary(spec))
    from mambaxfer_cli.render.model_view import geometry_line

    for size, ranks in layouts.items():
        out.print(fit(layout_table(f"TP {size}", ranks)))
        out.print(geometry_line(f"engine at TP {size}:", sides[size]), soft_wrap=False)
