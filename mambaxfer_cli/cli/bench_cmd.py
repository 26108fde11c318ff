"""``mambaxfer bench``: the plan's real transfer, coalesced and one descriptor, pull and push."""

from __future__ import annotations

from pathlib import Path

from mambaxfer_cli.cli.options import EngineArgs, ModelArgs, OutputArgs, PairArgs, RequestArgs, RunArgs, a_file
from mambaxfer_cli.cli.params import OUTPUT, REQUEST, command, option
from mambaxfer_cli.cli.report import finish
from mambaxfer_cli.engines import beside, chosen, one
from mambaxfer_cli.render.report import CHART_EXTRA_HELP


@command(uses={"model": ModelArgs.given("model", "variant"),
               "engines": EngineArgs.given(*EngineArgs.ONE_ENGINE),
               "request": RequestArgs.given("semantics", "seed"), "output": OutputArgs.given("fmt")},
         required=("model", "p_tp", "d_tp"), defaults={"iters": 20})
def bench(
    model: ModelArgs,
    pair: PairArgs,
    engines: EngineArgs,
    request: RequestArgs,
    run: RunArgs,
    output: OutputArgs,
    sweep: str = option(
        "--request-blocks", help="Request sizes to sweep: logical blocks per KV-cache group, comma-separated.",
        panel=REQUEST, default="1,4,16"),
    chart: Path | None = option("--chart", help=f"Write a PNG of GB/s against request size (needs matplotlib: "
                                                f"{CHART_EXTRA_HELP}).", panel=OUTPUT, parser=a_file,
                                metavar="<path>"),
) -> None:
    """Measure the plan's transfer between real NIXL agents, as planned, coalesced, and as one
    descriptor per source (the machine's limit), pulled (D READs) and pushed (P WRITEs); every
    byte verified.

    It moves what the engine moves unless --semantics exact asks for mambaxfer's plan: vLLM's reads;
    with --engine sglang, SGLang's WRITE of one slot per entry, as planned and as one descriptor per
    P -> D pair. With --engine vllm,sglang: both engines' exact transfer in one run, side by side.

    [bold]Examples[/]

    mambaxfer bench --model jamba --p-tp 1 --d-tp 4 --request-blocks 1,4,16,64

    mambaxfer bench --model qwen3-next-80b --p-tp 2 --d-tp 1 --format json --chart bench.png

    mambaxfer bench --engine vllm,sglang --model nemotron-h-8b --p-tp 1 --d-tp 2
    """
    if len(chosen(engines.engine)) == 1:
        finish(one(engines.engine).bench(model, pair, engines, request, run, sweep, chart), output)
        return
    finish(beside(engines.engine, lambda first, other: first.bench_beside(other, model, pair, engines, request, run,
                                                                          sweep, chart)), output)
