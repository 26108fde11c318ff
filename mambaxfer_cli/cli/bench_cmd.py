"""``mambaxfer bench``: the plan's real transfer, coalesced and one descriptor, pull and push."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from mambaxfer_cli.cli import app
from mambaxfer_cli.cli.options import (
    MODEL_HELP, BackendOpt, BlockSizeOpt, KvDtypeOpt, PrefixOpt, Semantics, VariantOpt, load,
)
from mambaxfer_cli.errors import UserError

EXIT_CORRUPT = 1
EXIT_RUN_FAILED = 3


class BenchFormat(str, Enum):
    table = "table"
    json = "json"


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--request-blocks '{text}': give block counts like '1,4,16'") from None
    if not sizes or min(sizes) < 1:
        raise UserError(f"--request-blocks '{text}': every size must be >= 1")
    return sizes


def _devices(text: str) -> list[str]:
    from mambaxfer_cli.execute.device import resolve_device

    out = []
    for name in [x.strip() for x in text.split(",") if x.strip()] or ["auto"]:
        if name not in ("auto", "cpu", "cuda"):
            raise UserError(f"--device '{name}': one of auto, cpu, cuda (comma-separated for a sweep)")
        out.append(resolve_device(name))
    return out


@app.command("bench")
def bench(
    model: Annotated[str, typer.Option("--model", "-m", help=MODEL_HELP, show_default=False)],
    p_tp: Annotated[int, typer.Option("--p-tp", help="Prefill (P) TP size.", show_default=False)],
    d_tp: Annotated[int, typer.Option("--d-tp", help="Decode (D) TP size.", show_default=False)],
    request_blocks: Annotated[str, typer.Option(
        "--request-blocks", help="Request sizes to sweep: logical blocks per KV-cache group, comma-separated.")
    ] = "1,4,16",
    device: Annotated[str, typer.Option(
        "--device", help="cpu (DRAM), cuda (VRAM) or auto; comma-separated for a sweep, e.g. cpu,cuda.")] = "cpu",
    iters: Annotated[int, typer.Option("--iters", help="Transfers per variant and direction (median, p99).")] = 20,
    semantics: Annotated[Semantics, typer.Option(
        "--semantics", help="exact: mambaxfer's reads; vllm: what vLLM 0.33 issues.", case_sensitive=False)
    ] = Semantics.vllm,
    layers: Annotated[Optional[int], typer.Option(
        "--layers", help="Use only the model's first N cache-keeping layers. Default: all.", show_default=False)] = None,
    attention_backend: BackendOpt = "FLASH_ATTN",
    block_size: BlockSizeOpt = 16,
    kv_cache_dtype: KvDtypeOpt = "auto",
    enable_prefix_caching: PrefixOpt = True,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the request's block IDs.")] = 0,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds each request size's run may take.")] = 120.0,
    fmt: Annotated[BenchFormat, typer.Option(
        "--format", "-f", help="table, or json (mambaxfer.bench/v1).")] = BenchFormat.table,
    chart: Annotated[Optional[Path], typer.Option(
        "--chart", help="Write a PNG of GB/s against request size (needs matplotlib).", show_default=False)] = None,
    variant: VariantOpt = None,
) -> None:
    """Measure the plan's transfer between real NIXL agents, as planned, coalesced, and as one
    descriptor per source (the machine's limit), pulled (D READs) and pushed (P WRITEs); every
    byte verified. Exit 0: verified; 1: wrong bytes; 2: user error; 3: the run failed."""
    import importlib.util

    from mambaxfer_cli.cli import fail
    from mambaxfer_cli.execute.coordinator import RunFailure
    from mambaxfer_cli.execute.nixl_api import INSTALL_HINT

    if iters < 1:
        raise UserError("--iters must be >= 1")
    sizes = _sizes(request_blocks)
    from mambaxfer_cli.execute.bench import bench_document, bench_point, write_chart
    from mambaxfer_cli.execute.plan_source import cut_layers, plan_to_execute
    from mambaxfer_cli.geometry import EngineFlags

    engine = EngineFlags(attention_backend=attention_backend, block_size=block_size,
                         kv_cache_dtype=kv_cache_dtype, prefix_caching=enable_prefix_caching)
    spec = cut_layers(load(model, variant, None, None, None, None, None), layers)
    plans = [tuple(plan_to_execute(spec, p_tp, d_tp, semantics=semantics.value, coalesce=c, blocks=None,
                                   request_blocks=n, seed=seed, engine=engine) for c in (False, True))
             for n in sizes]
    if importlib.util.find_spec("nixl") is None:
        raise UserError(f"NIXL is not installed; {INSTALL_HINT}")
    devices = _devices(device)
    if chart is not None and chart.suffix.lower() != ".png":
        raise UserError(f"--chart {chart}: the chart is a PNG; name it *.png")

    from mambaxfer_cli.render.bench_view import BenchProgress, bench_tables

    points = []
    with BenchProgress(len(plans) * len(devices)) as view:
        for kind, gpus in devices:
            for n, (planned, coalesced) in zip(sizes, plans):
                view.start(f"{kind} {n} blocks/request")
                try:
                    points.append(bench_point(planned, coalesced, kind, gpus, iters, timeout, view.update))
                except RunFailure as exc:
                    fail(str(exc))
                    raise typer.Exit(EXIT_RUN_FAILED) from None
                except UserError as exc:
                    raise UserError(f"{kind}, --request-blocks {n}: {exc}".replace(
                        "use fewer --blocks or --layers (or plan with fewer --p-num-blocks/--d-num-blocks)",
                        "use smaller --request-blocks or fewer --layers")) from None
                view.advance()
    document = bench_document(plans[0][0], points, iters)
    if fmt is BenchFormat.json:
        import json

        typer.echo(json.dumps(document, indent=2))
    else:
        from mambaxfer_cli.render.console import console

        out = console()
        for table in bench_tables(document):
            out.print(table)
    if chart is not None:
        why = write_chart(document, chart)
        typer.echo(f"chart skipped: {why}" if why else f"chart written to {chart}", err=True)
    if not document["verified"]:
        raise typer.Exit(EXIT_CORRUPT)
