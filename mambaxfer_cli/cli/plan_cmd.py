"""``mambaxfer plan``: the reads and descriptor-ID maps of one P/D pairing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mambaxfer_cli.cli.outcome import verdict
from mambaxfer_cli.cli.options import (
    BackendOpt, BlockSizeOpt, CoalesceOpt, ConvDtypeOpt, DBackendOpt, DBlockSizeOpt, DecodeBlocksOpt,
    DKvDtypeOpt, DNumBlocksOpt, DPhysOpt, DPrefixOpt, DTpOpt, Format, HeadSizeOpt, KvDtypeOpt,
    KvGroupsOpt, KvHeadsOpt, KvTensorsOpt, ModelOpt, NumSpecOpt, OutputOption, PBackendOpt, PBlockSizeOpt,
    PKvDtypeOpt, PNumBlocksOpt, PPhysOpt, PPrefixOpt, PrefillBlocksOpt, PrefixOpt, PTpOpt,
    RequestBlocksOpt, SeedOpt, Semantics, SemanticsOpt, SsmDtypeOpt, SsmTensorsOpt, StreamsOpt,
    VariantOpt, check_bounds, both_engines, dump, load, plan_options, stamped, write_output,
)


def plan(
    model: ModelOpt,
    p_tp: PTpOpt,
    d_tp: DTpOpt,
    semantics: SemanticsOpt = Semantics.exact,
    coalesce: CoalesceOpt = False,
    fmt: Annotated[Format, OutputOption(
        "--format", "-f", help="table, json or yaml (mambaxfer.plan/v1).")] = Format.table,
    d_rank: Annotated[Optional[int], OutputOption("--d-rank", help="Show only this D rank.")] = None,
    output: Annotated[Optional[Path], OutputOption(
        "--output", "-o", help="Write the plan document (JSON, or YAML with --format yaml) to FILE.")] = None,
    variant: VariantOpt = None,
    conv_dtype: ConvDtypeOpt = None,
    ssm_dtype: SsmDtypeOpt = None,
    num_spec: NumSpecOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_size: HeadSizeOpt = None,
    attention_backend: BackendOpt = "FLASH_ATTN",
    p_attention_backend: PBackendOpt = None,
    d_attention_backend: DBackendOpt = None,
    block_size: BlockSizeOpt = 16,
    p_block_size: PBlockSizeOpt = None,
    d_block_size: DBlockSizeOpt = None,
    kv_cache_dtype: KvDtypeOpt = "auto",
    p_kv_cache_dtype: PKvDtypeOpt = None,
    d_kv_cache_dtype: DKvDtypeOpt = None,
    enable_prefix_caching: PrefixOpt = True,
    p_enable_prefix_caching: PPrefixOpt = None,
    d_enable_prefix_caching: DPrefixOpt = None,
    p_num_blocks: PNumBlocksOpt = 100_000,
    d_num_blocks: DNumBlocksOpt = 100_000,
    p_blocks_per_logical: PPhysOpt = None,
    d_blocks_per_logical: DPhysOpt = None,
    attention_streams: StreamsOpt = 1,
    kv_groups: KvGroupsOpt = None,
    kv_tensors: KvTensorsOpt = None,
    ssm_tensors: SsmTensorsOpt = None,
    request_blocks: RequestBlocksOpt = 1,
    prefill_blocks: PrefillBlocksOpt = None,
    decode_blocks: DecodeBlocksOpt = None,
    seed: SeedOpt = 0,
) -> None:
    """Plan a P/D transfer: both sides' layouts, every read, page diagrams and descriptor IDs.

    [bold]Examples[/]

    mambaxfer plan --model jamba --p-tp 1 --d-tp 4

    mambaxfer plan --model qwen3.5-0.8b --p-tp 2 --d-tp 1 --semantics vllm --output plan.json
    """
    from mambaxfer_cli.planning.plan import build_plan

    check_bounds(p_tp=p_tp, d_tp=d_tp)
    spec = load(model, variant, conv_dtype, ssm_dtype, num_spec, kv_heads, head_size)
    prefill, decode = both_engines(locals())
    options = plan_options(
        semantics=semantics, coalesce=coalesce, prefill=prefill, decode=decode,
        attention_streams=attention_streams, kv_groups=kv_groups, kv_tensors=kv_tensors,
        ssm_tensors=ssm_tensors, request_blocks=request_blocks, prefill_blocks=prefill_blocks,
        decode_blocks=decode_blocks, seed=seed)
    result = build_plan(spec, p_tp, d_tp, options)
    document = stamped(result.to_dict(d_rank))  # validates --d-rank before anything is written
    verdict(0)
    if output is not None:
        text = dump(document, Format.yaml if fmt is Format.yaml else Format.json)
        write_output(output, text)
        typer.echo(f"wrote {output}: {len(document['reads'])} reads, "
                   f"{len(document['descriptors']['reads'])} descriptor reads, "
                   f"{len(document['warnings'])} warnings", err=True)
        return
    if fmt is not Format.table:
        typer.echo(dump(document, fmt), nl=False)
        return
    from mambaxfer_cli.render.console import console, fit
    from mambaxfer_cli.render.plan_view import render_plan

    out = console()
    for part in render_plan(result, d_rank):
        out.print(fit(part))
