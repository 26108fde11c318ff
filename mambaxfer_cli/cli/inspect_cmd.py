"""``mambaxfer inspect``: every rank's state layout for one or more TP sizes."""

from __future__ import annotations

from typing import Annotated

import typer

from mambaxfer_cli.cli.outcome import keep_exit_code
from mambaxfer_cli.exits import EXIT_OK
from mambaxfer_cli.cli.options import (
    ServingEngineOpt,
    BackendOpt, BlockSizeOpt, ConvDtypeOpt, EngineOption, Format, GdnBackendOpt, GpuOpt, HeadSizeOpt, KvDtypeOpt,
    KvHeadsOpt, ModelOpt, NumSpecOpt, OutputOption, PrefixOpt, SsmDtypeOpt, VariantOpt, VllmVersionOpt, dump,
    engines, load, parse_tp_list, stamped,
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
    serving_engine: ServingEngineOpt = "vllm",
    vllm_version: VllmVersionOpt = None,
    gpu: GpuOpt = None,
    gdn_prefill_backend: GdnBackendOpt = None,
    attention_backend: BackendOpt = None,
    block_size: BlockSizeOpt = None,
    kv_cache_dtype: KvDtypeOpt = None,
    enable_prefix_caching: PrefixOpt = None,
) -> None:
    """Show each rank's sub-projection dims, shards, byte offsets and sizes for the given TP sizes,
    and the block geometry the vLLM release derives for an engine of each TP size on the GPU.

    [bold]Examples[/]

    mambaxfer inspect --model nemotron-h-8b --tp 1,2,4

    mambaxfer inspect --model ./my-model/config.json --tp 8 --format json
    """
    from mambaxfer_cli.engines.vllm.engine import engine_layout
    from mambaxfer_cli.planning.kv_groups import vllm_grouping

    spec = load(model, variant, conv_dtype, ssm_dtype, num_spec, kv_heads, head_size)
    flags = engines(engine=serving_engine, vllm_version=vllm_version, gpu=gpu, gdn_prefill_backend=gdn_prefill_backend,
                    attention_backend=attention_backend, block_size=block_size, kv_cache_dtype=kv_cache_dtype,
                    enable_prefix_caching=enable_prefix_caching).decode
    grouping = vllm_grouping(spec.layers)
    sides = {size: engine_layout(spec, size, flags, grouping) for size in parse_tp_list(tp)}
    layouts = {size: side.ranks for size, side in sides.items()}
    keep_exit_code(EXIT_OK)
    if fmt is not Format.table:
        document = {"schema": "mambaxfer.inspect/v1", "vllm_version": flags.release.name, "gpu": flags.gpu.spec,
                    "model": spec.to_dict(),
                    "layouts": {str(size): [r.to_dict() for r in ranks] for size, ranks in layouts.items()},
                    "engines": {str(size): side.geometry.to_dict() for size, side in sides.items()}}
        typer.echo(dump(stamped(document), fmt), nl=False)
        return
    from mambaxfer_cli.render.console import console, fit_all, together
    from mambaxfer_cli.render.model_view import engine_header, geometry_line, layout_table, model_summary

    out = console()
    out.print(model_summary(spec))
    out.print(engine_header(flags))
    tables = fit_all(together([layout_table(f"TP {size}", ranks) for size, ranks in layouts.items()], "layouts"), out)
    for size, table in zip(layouts, tables):
        out.print(table)
        out.print(geometry_line(f"engine at TP {size}:", sides[size]))
