"""``mambaxfer plan``: the reads and descriptor-ID maps of one P/D pairing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mambaxfer_cli.cli.outcome import keep_exit_code
from mambaxfer_cli.exits import EXIT_OK
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.cli.options import (
    ServingEngineOpt,
    BackendOpt, BlockSizeOpt, CoalesceOpt, ConvDtypeOpt, DBackendOpt, DBlockSizeOpt, DKvDtypeOpt, DNumBlocksOpt,
    DPhysOpt, DPrefixOpt, DTpOpt, DVllmVersionOpt, DecodeBlocksOpt, Format, GdnBackendOpt, GpuOpt, HeadSizeOpt,
    KvDtypeOpt, KvGroupsOpt, KvHeadsOpt, KvTensorsOpt, ModelOpt, NumSpecOpt, OutputOption, PBackendOpt,
    PBlockSizeOpt, PKvDtypeOpt, PNumBlocksOpt, PPhysOpt, PPrefixOpt, PTpOpt, PVllmVersionOpt, PrefillBlocksOpt,
    PrefixOpt, RequestBlocksOpt, SeedOpt, Semantics, SemanticsOpt, SsmDtypeOpt, SsmTensorsOpt, StreamsOpt,
    VariantOpt, VllmVersionOpt, check_bounds, dump, engines, load, plan_options, stamped, write_output,
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
    """Plan a P/D transfer: whether vLLM accepts it, both engines and the reads; with --show, both
    sides' layouts, every segment, page diagrams and descriptor IDs.

    [bold]Examples[/]

    mambaxfer plan --model jamba --p-tp 1 --d-tp 4

    mambaxfer plan --model jamba --p-tp 1 --d-tp 4 --show all

    mambaxfer plan --model qwen3.5-0.8b --p-tp 2 --d-tp 1 --semantics vllm --output plan.json
    """
    from mambaxfer_cli.engines.vllm.plan import build_plan

    check_bounds(p_tp=p_tp, d_tp=d_tp)
    sections = shown_sections(show)
    spec = load(model, variant, conv_dtype, ssm_dtype, num_spec, kv_heads, head_size)
    deployment = engines(
        engine=serving_engine,
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
    check_document_fits(spec, p_tp, d_tp, options, d_rank, Format.yaml if fmt is Format.yaml else Format.json)
    result = build_plan(spec, p_tp, d_tp, options)
    document = stamped(result.to_dict(d_rank))  # validates --d-rank before anything is written
    keep_exit_code(EXIT_OK)
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
    if show is None:
        return ()
    from mambaxfer_cli.render.plan_view import SECTIONS

    names = [name.strip().lower() for name in show.split(",") if name.strip()]
    if "all" in names:
        return SECTIONS
    unknown = [name for name in names if name not in SECTIONS]
    if unknown or not names:
        raise UserError(f"--show: {'unknown section ' + repr(unknown[0]) if unknown else 'name a section'}; "
                        f"choose from {', '.join(SECTIONS)} or all, comma-separated")
    return tuple(name for name in SECTIONS if name in names)


def _values(document) -> int:
    """Values in a document as ``limits.check_document`` counts them (a dict's keys included)."""
    count, stack = 0, [document]
    while stack:
        value = stack.pop()
        count += 1
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return count


def check_document_fits(spec, p_tp: int, d_tp: int, options, d_rank: int | None, fmt: Format) -> None:
    """Refuse, before building it, a plan whose document ``execute --plan`` could not read back
    (more than MAX_FILE_BYTES or MAX_NODES values). The document grows by the same amount with
    every request block (each adds its descriptor IDs to every read): the plans for 1 and 2 blocks
    give the growth, and 5% is kept for the IDs' varying widths."""
    import re
    from dataclasses import replace

    from mambaxfer_cli.limits import MAX_FILE_BYTES, MAX_NODES
    from mambaxfer_cli.engines.vllm.plan import build_plan

    listed = max((len(re.findall(r"\d+", text)) for text in (options.prefill_blocks, options.decode_blocks)
                  if text is not None), default=0)
    blocks = max(options.request_blocks, listed)
    if blocks <= 2:
        return
    sizes = []
    for k in (1, 2):
        small = build_plan(spec, p_tp, d_tp, replace(options, request_blocks=k, prefill_blocks=None,
                                                     decode_blocks=None))
        document = small.to_dict(d_rank)
        sizes.append((_values(document), len(dump(document, fmt).encode())))
    (n1, b1), (n2, b2) = sizes
    room = 1.05
    nodes, size = room * (n1 + (n2 - n1) * (blocks - 1)), room * (b1 + (b2 - b1) * (blocks - 1))
    if nodes <= MAX_NODES and size <= MAX_FILE_BYTES:
        return
    most = 1 + min(int((MAX_NODES / room - n1) // max(n2 - n1, 1)),
                   int((MAX_FILE_BYTES / room - b1) // max(b2 - b1, 1)))
    raise UserError(f"{blocks} request blocks make a plan document of about {size / 2**20:,.1f} MiB and "
                    f"{nodes:,.0f} values, past what execute --plan reads ({MAX_FILE_BYTES >> 20} MiB, {MAX_NODES:,} "
                    f"values); use at most {max(most, 1)} for {spec.name} {p_tp}:{d_tp}")
