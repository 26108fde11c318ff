"""``mambaxfer check``: prove P/D plans byte by byte, the gate to put in CI."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

from mambaxfer_cli.cli.options import (
    ServingEngineOpt,
    BackendOpt, BlockSizeOpt, CheckSemantics, CoalesceOpt, ConvDtypeOpt, DBackendOpt, DBlockSizeOpt, DKvDtypeOpt,
    DNumBlocksOpt, DPhysOpt, DPrefixOpt, DVllmVersionOpt, DecodeBlocksOpt, EngineOption, Format, GdnBackendOpt,
    GpuOpt, HeadSizeOpt, KvDtypeOpt, KvGroupsOpt, KvHeadsOpt, KvTensorsOpt, MODEL_HELP, ModelOption, NumSpecOpt,
    OutputOption, PBackendOpt, PBlockSizeOpt, PKvDtypeOpt, PNumBlocksOpt, PPhysOpt, PPrefixOpt, PVllmVersionOpt,
    PrefillBlocksOpt, PrefixOpt, RequestBlocksOpt, RequestOption, SeedOpt, Semantics, SsmDtypeOpt, SsmTensorsOpt,
    StreamsOpt, VariantOpt, VllmVersionOpt, check_writable, engines, load, plan_options,
)
from mambaxfer_cli.errors import UserError


def check(
    model: Annotated[Optional[str], ModelOption(
        "--model", "-m", help=MODEL_HELP + " Or use --all-presets.", show_default=False)] = None,
    pairs: Annotated[Optional[str], EngineOption(
        "--pairs", help="P:D TP pairs to check, e.g. 1:4,4:1,2:3.", show_default=False)] = None,
    max_tp: Annotated[Optional[int], EngineOption(
        "--max-tp", help="Check every pairing of TP sizes up to N valid for the model "
                         "(the default, with N = 8).", show_default=False)] = None,
    all_presets: Annotated[bool, EngineOption(
        "--all-presets/--no-all-presets",
        help="Check every built-in model (up to TP 8 unless --max-tp or --pairs).")] = False,
    semantics: Annotated[CheckSemantics, RequestOption(
        "--semantics", case_sensitive=False,
        help="both: mambaxfer's exact plan and what vLLM does (accepts and moves the right bytes, "
             "corrupts them, or refuses); exact: only mambaxfer's plan; vllm: only vLLM's reads.")
    ] = CheckSemantics.both,
    coalesce: CoalesceOpt = False,
    fmt: Annotated[Format, OutputOption(
        "--format", "-f", help="table, json or yaml (mambaxfer.check/v1).")] = Format.table,
    junit: Annotated[Optional[Path], OutputOption(
        "--junit", help="Also write the results as JUnit XML to FILE.", show_default=False)] = None,
    variant: VariantOpt = None,
    conv_dtype: ConvDtypeOpt = None,
    ssm_dtype: SsmDtypeOpt = None,
    num_spec: NumSpecOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_size: HeadSizeOpt = None,
    serving_engine: ServingEngineOpt = "vllm",
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
    """Will these P/D pairings work? Each pairing's transfer is simulated on real bytes and every
    byte and descriptor ID verified: mambaxfer's exact plan, and the reads vLLM issues.

    Exit code 0: every pairing works; 1: vLLM refuses a pairing or moves wrong bytes, or a plan is
    wrong (one line each, with the fix); 2: a usage error; 70: an internal error.

    [bold]Examples[/]

    mambaxfer check --model granite-4.0-h-tiny --pairs 1:2,2:1

    mambaxfer check --model granite-4.0-h-tiny --pairs 1:2 --semantics vllm

    mambaxfer check --all-presets --junit junit.xml
    """
    from mambaxfer_cli.proof import CHECK_NUM_BLOCKS
    from mambaxfer_cli.proof.check import run_check, targets_for

    if (model is None) == (not all_presets):
        raise UserError("give --model M or --all-presets (one of them)")
    if model is not None:
        names = [model]
    else:
        from mambaxfer_cli.readers.model_source import preset_names

        names = preset_names()
    specs = [load(name, variant, conv_dtype, ssm_dtype, num_spec, kv_heads, head_size) for name in names]
    deployment = engines(
        engine=serving_engine,
        vllm_version=vllm_version, p_vllm_version=p_vllm_version, d_vllm_version=d_vllm_version, gpu=gpu,
        gdn_prefill_backend=gdn_prefill_backend, attention_backend=attention_backend,
        p_attention_backend=p_attention_backend, d_attention_backend=d_attention_backend, block_size=block_size,
        p_block_size=p_block_size, d_block_size=d_block_size, kv_cache_dtype=kv_cache_dtype,
        p_kv_cache_dtype=p_kv_cache_dtype, d_kv_cache_dtype=d_kv_cache_dtype,
        enable_prefix_caching=enable_prefix_caching, p_enable_prefix_caching=p_enable_prefix_caching,
        d_enable_prefix_caching=d_enable_prefix_caching,
        p_num_blocks=CHECK_NUM_BLOCKS["prefill"] if p_num_blocks is None else p_num_blocks,
        d_num_blocks=CHECK_NUM_BLOCKS["decode"] if d_num_blocks is None else d_num_blocks,
        p_blocks_per_logical=p_blocks_per_logical, d_blocks_per_logical=d_blocks_per_logical)
    options = plan_options(
        semantics=Semantics.vllm if semantics is CheckSemantics.vllm else Semantics.exact, coalesce=coalesce,
        engines=deployment,
        attention_streams=attention_streams, kv_groups=kv_groups, kv_tensors=kv_tensors,
        ssm_tensors=ssm_tensors, request_blocks=request_blocks, prefill_blocks=prefill_blocks,
        decode_blocks=decode_blocks, seed=seed)
    targets = targets_for(specs, pairs, max_tp, semantics.value)
    if junit is not None:   # fail before the run, not after it
        check_writable(junit, "--junit")

    from mambaxfer_cli.render.check_view import progress, render_report

    with progress() as (on_start, on_result):
        report = run_check(targets, options, on_start, on_result, semantics=semantics.value)
    from mambaxfer_cli.cli.report import finish
    from mambaxfer_cli.render.junit import junit_xml

    finish(report.exit_code, report.to_dict(), fmt, lambda: render_report(report), junit, lambda: junit_xml(report))
