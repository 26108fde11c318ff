"""``mambaxfer plan``: the reads and descriptor-ID maps of one P/D pairing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mambaxfer_cli.cli import app, verdict
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.cli.options import (
    BackendOpt, BlockSizeOpt, CoalesceOpt, ConvDtypeOpt, DBackendOpt, DBlockSizeOpt, DecodeBlocksOpt,
    DKvDtypeOpt, DNumBlocksOpt, DPhysOpt, DPrefixOpt, DTpOpt, Format, HeadSizeOpt, KvDtypeOpt,
    KvGroupsOpt, KvHeadsOpt, KvTensorsOpt, ModelOpt, NumSpecOpt, OutputOption, PBackendOpt, PBlockSizeOpt,
    PKvDtypeOpt, PNumBlocksOpt, PPhysOpt, PPrefixOpt, PrefillBlocksOpt, PrefixOpt, PTpOpt,
    RequestBlocksOpt, SeedOpt, Semantics, SemanticsOpt, SsmDtypeOpt, SsmTensorsOpt, StreamsOpt,
    VariantOpt, check_bounds, both_engines, dump, load, plan_options, stamped, write_output,
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
    show: Annotated[Optional[str], OutputOption(
        "--show", help="Also show, comma-separated: layouts (both sides' ranks), reads (every segment), "
                       "diagram (where each D byte comes from), ids (descriptor IDs), notes; or all.",
        show_default=False)] = None,
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
    """Plan a P/D transfer: whether vLLM accepts it, both engines and the reads; with --show, both
    sides' layouts, every segment, page diagrams and descriptor IDs.

    [bold]Examples[/]

    mambaxfer plan --model jamba --p-tp 1 --d-tp 4

    mambaxfer plan --model jamba --p-tp 1 --d-tp 4 --show all

    mambaxfer plan --model qwen3.5-0.8b --p-tp 2 --d-tp 1 --semantics vllm --output plan.json
    """
    from mambaxfer_cli.planning.plan import build_plan

    check_bounds(p_tp=p_tp, d_tp=d_tp)
    sections = shown_sections(show)
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
        from rich.console import Console

        from mambaxfer_cli.render.plan_view import verdict_line

        text = dump(document, Format.yaml if fmt is Format.yaml else Format.json)
        write_output(output, text)
        warnings = document["warnings"]
        said = f": {', '.join(w['code'] for w in warnings)}" if warnings else ""
        err = Console(stderr=True, highlight=False)
        err.print(verdict_line(result))
        err.print(f"wrote {output}: {len(document['reads'])} reads, {len(document['descriptors']['reads'])} "
                  f"descriptor reads, {len(warnings)} warning{'' if len(warnings) == 1 else 's'}{said}",
                  markup=False)
        return
    if fmt is not Format.table:
        typer.echo(dump(document, fmt), nl=False)
        return
    from mambaxfer_cli.render.console import console, fit_all
    from mambaxfer_cli.render.plan_view import render_plan

    out = console()
    for part in fit_all(render_plan(result, d_rank, sections, out.width), out):
        out.print(part)


def shown_sections(show: str | None) -> tuple[str, ...]:
    """``--show layouts,ids`` (or ``all``) as the sections to add to the brief form."""
    from mambaxfer_cli.render.plan_view import SECTIONS

    if show is None:
        return ()
    names = [name.strip().lower() for name in show.split(",") if name.strip()]
    if "all" in names:
        return SECTIONS
    unknown = [name for name in names if name not in SECTIONS]
    if unknown or not names:
        raise UserError(f"--show: {'unknown section ' + repr(unknown[0]) if unknown else 'name a section'}; "
                        f"choose from {', '.join(SECTIONS)} or all, comma-separated")
    return tuple(name for name in SECTIONS if name in names)
