"""``mambaxfer plan``: the reads and descriptor-ID maps of one P/D pairing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mambaxfer_cli.cli import app, verdict
from mambaxfer_cli.cli.options import (
    BackendOpt, BlockSizeOpt, CoalesceOpt, ConvDtypeOpt, DBackendOpt, DBlockSizeOpt, DKvDtypeOpt, DNumBlocksOpt,
    DPhysOpt, DPrefixOpt, DTpOpt, DVllmVersionOpt, DecodeBlocksOpt, Format, GdnBackendOpt, GpuOpt, HeadSizeOpt,
    KvDtypeOpt, KvGroupsOpt, KvHeadsOpt, KvTensorsOpt, ModelOpt, NumSpecOpt, OutputOption, PBackendOpt,
    PBlockSizeOpt, PKvDtypeOpt, PNumBlocksOpt, PPhysOpt, PPrefixOpt, PTpOpt, PVllmVersionOpt, PrefillBlocksOpt,
    PrefixOpt, RequestBlocksOpt, SeedOpt, Semantics, SemanticsOpt, SsmDtypeOpt, SsmTensorsOpt, StreamsOpt,
    VariantOpt, VllmVersionOpt, check_bounds, dump, engines, load, plan_options, stamped, write_output,
)


@app.command("plan")
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
    vllm_version: VllmVersionOpt = None,
    p_vllm_version: PVllmVersionOpt = None,
    d_vllm_version: DVllmVersionOpt = None,
    gpu: GpuOpt = None,
    gdn_prefill_backend: GdnBackendOpt = None,
    attention_backend: BackendOpt = None,
    p_attention_backend: PBackendOpt = None,
    d_attention_backend: DBackendOpt = None,
    block_size: BlockSizeOpt = None,
    p_block_size: PBlockSizeOpt = None,
    d_block_size: DBlockSizeOpt = None,
    kv_cache_dtype: KvDtypeOpt = None,
    p_kv_cache_dtype: PKvDtypeOpt = None,
    d_kv_cache_dtype: DKvDtypeOpt = None,
    enable_prefix_caching: PrefixOpt = None,
    p_enable_prefix_caching: PPrefixOpt = None,
    d_enable_prefix_caching: DPrefixOpt = None,
    p_num_blocks: PNumBlocksOpt = None,
    d_num_blocks: DNumBlocksOpt = None,
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
    deployment = engines(
        vllm_version=vllm_version, p_vllm_version=p_vllm_version, d_vllm_version=d_vllm_version, gpu=gpu,
        gdn_prefill_backend=gdn_prefill_backend, attention_backend=attention_backend,
        p_attention_backend=p_attention_backend, d_attention_backend=d_attention_backend, block_size=block_size,
        p_block_size=p_block_size, d_block_size=d_block_size, kv_cache_dtype=kv_cache_dtype,
        p_kv_cache_dtype=p_kv_cache_dtype, d_kv_cache_dtype=d_kv_cache_dtype,
        enable_prefix_caching=enable_prefix_caching, p_enable_prefix_caching=p_enable_prefix_caching,
        d_enable_prefix_caching=d_enable_prefix_caching, p_num_blocks=p_num_blocks, d_num_blocks=d_num_blocks,
        p_blocks_per_logical=p_blocks_per_logical, d_blocks_per_logical=d_blocks_per_logical)
    options = plan_options(
        semantics=semantics, coalesce=coalesce, engines=deployment,
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
