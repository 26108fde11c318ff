"""``mambaxfer plan``: the reads and descriptor-ID maps of one P/D pairing."""

from __future__ import annotations

from mambaxfer_cli.cli.options import EngineArgs, ModelArgs, OutputArgs, PairArgs, RequestArgs, check_bounds
from mambaxfer_cli.cli.params import OUTPUT, command, option
from mambaxfer_cli.cli.report import finish
from mambaxfer_cli.engines import one


@command(uses={"model": ModelArgs.without("all_presets"), "output": OutputArgs.without("junit")},
         required=("model", "p_tp", "d_tp"))
def plan(
    model: ModelArgs,
    pair: PairArgs,
    engines: EngineArgs,
    request: RequestArgs,
    output: OutputArgs,
    d_rank: int | None = option("--d-rank", help="Show only this D rank.", panel=OUTPUT),
    show: str | None = option(
        "--show", help="Also show, comma-separated: layouts (both sides' ranks), reads (every segment), "
                       "diagram (where each D byte comes from), ids (descriptor IDs), notes; or all.", panel=OUTPUT),
) -> None:
    """Plan a P/D transfer: whether the engine (vLLM, or SGLang) accepts it, both sides and the
    reads; with --show, both sides' layouts, every segment, page diagrams and descriptor IDs.

    With --engine sglang: SGLang's entries, the writes it posts beside the exact ones, and its
    verdict.

    [bold]Examples[/]

    mambaxfer plan --model jamba --p-tp 1 --d-tp 4

    mambaxfer plan --model jamba --p-tp 1 --d-tp 4 --show all

    mambaxfer plan --model qwen3.5-0.8b --p-tp 2 --d-tp 1 --semantics vllm --output plan.json

    mambaxfer plan --engine sglang --model nemotron-h-8b --p-tp 1 --d-tp 2
    """
    check_bounds(p_tp=pair.p_tp or 0, d_tp=pair.d_tp or 0)
    finish(one(engines.engine).plan(model, pair, engines, request, output, d_rank, show), output)
