"""``mambaxfer bench``: the plan's real transfer, coalesced and one descriptor, pull and push."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from mambaxfer_cli.cli.outcome import keep_exit_code, said
from mambaxfer_cli.cli.options import (
    ServingEngineOpt,
    BackendOpt, BlockSizeOpt, EngineOption, GdnBackendOpt, GpuOpt, KvDtypeOpt, MODEL_HELP, ModelOption,
    OutputOption, PrefixOpt, RequestOption, Semantics, VariantOpt, VllmVersionOpt, engines, load, stamped,
)
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import EXIT_OK, EXIT_RUN_FAILED, EXIT_WRONG


class BenchFormat(str, Enum):
    table = "table"
    json = "json"


def _sizes(text: str) -> list[int]:
    from mambaxfer_cli.limits import check_bounds

    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--request-blocks '{text[:40]}': give block counts like '1,4,16'") from None
    if not sizes:
        raise UserError(f"--request-blocks '{text[:40]}': give block counts like '1,4,16'")
    for size in sizes:
        check_bounds(request_blocks=size)
    return sizes


def _devices(text: str) -> list[tuple[str, int]]:
    from mambaxfer_cli.execute.device import resolve_device

    out = []
    for name in [x.strip() for x in text.split(",") if x.strip()] or ["auto"]:
        if name not in ("auto", "cpu", "cuda"):
            raise UserError(f"--device '{name}': one of auto, cpu, cuda (comma-separated for a sweep)")
        out.append(resolve_device(name))
    return out


def bench(
    model: Annotated[str, ModelOption("--model", "-m", help=MODEL_HELP, show_default=False)],
    p_tp: Annotated[int, EngineOption("--p-tp", help="Prefill (P) TP size.", show_default=False)],
    d_tp: Annotated[int, EngineOption("--d-tp", help="Decode (D) TP size.", show_default=False)],
    request_blocks: Annotated[str, RequestOption(
        "--request-blocks", help="Request sizes to sweep: logical blocks per KV-cache group, comma-separated.")
    ] = "1,4,16",
    device: Annotated[str, EngineOption(
        "--device", help="cpu (DRAM), cuda (VRAM) or auto; comma-separated for a sweep, e.g. cpu,cuda.")] = "cpu",
    iters: Annotated[int, RequestOption("--iters", help="Transfers per variant and direction (median, p99).")] = 20,
    semantics: Annotated[Semantics, RequestOption(
        "--semantics", help="exact: mambaxfer's reads; vllm: what vLLM issues.", case_sensitive=False)
    ] = Semantics.vllm,
    layers: Annotated[Optional[int], ModelOption(
        "--layers", help="Use only the model's first N cache-keeping layers. Default: all.",
        show_default=False)] = None,
    serving_engine: ServingEngineOpt = "vllm",
    vllm_version: VllmVersionOpt = None,
    gpu: GpuOpt = None,
    gdn_prefill_backend: GdnBackendOpt = None,
    attention_backend: BackendOpt = None,
    block_size: BlockSizeOpt = None,
    kv_cache_dtype: KvDtypeOpt = None,
    enable_prefix_caching: PrefixOpt = None,
    seed: Annotated[int, RequestOption("--seed", help="Seed of the request's block IDs.")] = 0,
    timeout: Annotated[float, OutputOption(
        "--timeout", help="Stop a run after this many seconds without progress (no rank working or "
                          "reaching a new step).")] = 120.0,
    fmt: Annotated[BenchFormat, OutputOption(
        "--format", "-f", help="table, or json (mambaxfer.bench/v1).")] = BenchFormat.table,
    chart: Annotated[Optional[Path], OutputOption(
        "--chart", help="Write a PNG of GB/s against request size (needs matplotlib).", show_default=False)] = None,
    variant: VariantOpt = None,
) -> None:
    """Measure the plan's transfer between real NIXL agents, as planned, coalesced, and as one
    descriptor per source (the machine's limit), pulled (D READs) and pushed (P WRITEs); every
    byte verified.

    Exit 0: every byte verified; 1: wrong bytes; 2: user error; 3: a run failed; 70: an internal
    error; 130: interrupted (every rank is stopped).

    [bold]Examples[/]

    mambaxfer bench --model jamba --p-tp 1 --d-tp 4 --request-blocks 1,4,16,64

    mambaxfer bench --model qwen3-next-80b --p-tp 2 --d-tp 1 --format json --chart bench.png
    """
    import importlib.util

    from mambaxfer_cli.cli.outcome import red_line
    from mambaxfer_cli.execute.coordinator import RunFailure
    from mambaxfer_cli.execute.nixl_api import INSTALL_HINT
    from mambaxfer_cli.limits import check_bounds, finite_seconds

    check_bounds(p_tp=p_tp, d_tp=d_tp, layers=layers, iters=iters, seed=seed)
    finite_seconds("--timeout", timeout)
    sizes = _sizes(request_blocks)
    if chart is not None and chart.suffix.lower() != ".png":
        raise UserError(f"--chart {chart}: the chart is a PNG; name it *.png")
    from mambaxfer_cli.execute.bench import bench_document, bench_point, write_chart
    from mambaxfer_cli.execute.plan_source import cut_layers, plan_to_execute
    from mambaxfer_cli.execute.tasks import check_fits

    engine = engines(engine=serving_engine, vllm_version=vllm_version, gpu=gpu, gdn_prefill_backend=gdn_prefill_backend,
                     attention_backend=attention_backend, block_size=block_size, kv_cache_dtype=kv_cache_dtype,
                     enable_prefix_caching=enable_prefix_caching).decode
    spec = cut_layers(load(model, variant, None, None, None, None, None), layers)
    plans = [tuple(plan_to_execute(spec, p_tp, d_tp, semantics=semantics.value, coalesce=c, blocks=None,
                                   request_blocks=n, seed=seed, engine=engine) for c in (False, True))
             for n in sizes]
    devices = _devices(device)
    for kind, _ in devices:      # up front: a sweep never stops at its largest size for want of memory
        for n, (planned, _) in zip(sizes, plans):
            try:
                check_fits(planned, kind, "use smaller --request-blocks or fewer --layers")
            except UserError as exc:
                raise UserError(f"{kind}, --request-blocks {n}: {exc}") from None
    if importlib.util.find_spec("nixl") is None:
        raise UserError(f"NIXL is not installed; {INSTALL_HINT}")
    refused = plans[0][0].verdict
    if not refused.accepts:    # worth knowing before reading the figures; stdout stays the document
        fix = f" (--block-size {refused.suggested_block_size} fixes it)" if refused.suggested_block_size else ""
        said(f"warning: {refused.releases} would refuse this pairing at handshake{fix}: "
             + " ".join(r.message for r in refused.refusals).rstrip(".") + "; bench measures mambaxfer's plan of it")

    from mambaxfer_cli.render.bench_view import BenchProgress, bench_tables

    points = []
    with BenchProgress(len(plans) * len(devices)) as view:
        for kind, gpus in devices:
            for n, (planned, coalesced) in zip(sizes, plans):
                view.start(f"{kind} {n} blocks/request")
                try:
                    points.append(bench_point(planned, coalesced, kind, gpus, iters, timeout, view.update))
                except RunFailure as exc:
                    red_line(str(exc))   # one red line, with the run's own exit code
                    raise typer.Exit(EXIT_RUN_FAILED) from None
                except UserError as exc:
                    raise UserError(f"{kind}, --request-blocks {n}: {exc}") from None
                view.advance()
    document = stamped({**bench_document(plans[0][0], points, iters), **plans[0][0].engines.to_dict()})
    keep_exit_code(EXIT_OK if document["verified"] else EXIT_WRONG)
    if fmt is BenchFormat.json:
        import json

        typer.echo(json.dumps(document, indent=2))
    else:
        from mambaxfer_cli.render.console import console, fit

        out = console()
        for table in bench_tables(document):
            out.print(fit(table))
    if chart is not None:
        why = write_chart(document, chart)
        typer.echo(f"chart skipped: {why}" if why else f"chart written to {chart}", err=True)
    if not document["verified"]:
        wrong = sum(row["wrong_bytes"] for point in document["points"] for rows in point["variants"].values()
                    for row in rows.values())
        how = ("vLLM's reads (--semantics vllm) land these bytes wrong"
               if semantics is Semantics.vllm else "mambaxfer's plan landed these bytes wrong")
        said(f"wrong bytes: {wrong} over the runs marked WRONG; {how}; 'mambaxfer check --model {model} "
             f"--pairs {p_tp}:{d_tp}' says which")
        raise typer.Exit(EXIT_WRONG)
