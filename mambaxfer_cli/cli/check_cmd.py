"""``mambaxfer check``: prove P/D plans byte by byte, the gate to put in CI."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

from mambaxfer_cli.cli.options import (
    MODEL_HELP, BackendOpt, BlockSizeOpt, CoalesceOpt, ConvDtypeOpt, DBackendOpt, DBlockSizeOpt,
    DecodeBlocksOpt, DKvDtypeOpt, DNumBlocksOpt, DPhysOpt, DPrefixOpt, EngineOption, Format, HeadSizeOpt,
    KvDtypeOpt, KvGroupsOpt, KvHeadsOpt, KvTensorsOpt, ModelOption, NumSpecOpt, OutputOption, PBackendOpt,
    PBlockSizeOpt, PKvDtypeOpt, PNumBlocksOpt, PPhysOpt, PPrefixOpt, PrefillBlocksOpt, PrefixOpt,
    RequestBlocksOpt, SeedOpt, Semantics, SemanticsOpt, SsmDtypeOpt, SsmTensorsOpt, StreamsOpt, VariantOpt,
    both_engines, check_writable, load, plan_options,
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
    semantics: SemanticsOpt = Semantics.exact,
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
    p_num_blocks: PNumBlocksOpt = 4096,
    d_num_blocks: DNumBlocksOpt = 2048,
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
    """Simulate each pairing's transfer on real bytes and verify every byte and descriptor ID.

    Exit code 0: every pairing verified; 1: a wrong byte or ID (explained); 2: a usage error;
    70: an internal error.

    [bold]Examples[/]

    mambaxfer check --model granite-4.0-h-tiny --pairs 1:2,2:1 --semantics vllm

    mambaxfer check --all-presets --junit junit.xml
    """
    from mambaxfer_cli.proof.check import run_check, targets_for

    if (model is None) == (not all_presets):
        raise UserError("give --model M or --all-presets (one of them)")
    if all_presets:
        from mambaxfer_cli.readers.model_source import preset_names

        names = preset_names()
    else:
        names = [model]
    specs = [load(name, variant, conv_dtype, ssm_dtype, num_spec, kv_heads, head_size) for name in names]
    prefill, decode = both_engines(locals())
    options = plan_options(
        semantics=semantics, coalesce=coalesce, prefill=prefill, decode=decode,
        attention_streams=attention_streams, kv_groups=kv_groups, kv_tensors=kv_tensors,
        ssm_tensors=ssm_tensors, request_blocks=request_blocks, prefill_blocks=prefill_blocks,
        decode_blocks=decode_blocks, seed=seed)
    targets = targets_for(specs, pairs, max_tp, options.semantics)
    if junit is not None:   # fail before the run, not after it
        check_writable(junit, "--junit")

    from mambaxfer_cli.render.check_view import progress, render_report

    with progress() as (on_start, on_result):
        report = run_check(targets, options, on_start, on_result)
    from mambaxfer_cli.cli.report import finish
    from mambaxfer_cli.render.junit import junit_xml

    finish(report.exit_code, report.to_dict(), fmt, lambda: render_report(report), junit, lambda: junit_xml(report))
