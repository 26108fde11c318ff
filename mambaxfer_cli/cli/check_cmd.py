"""``mambaxfer check``: prove P/D plans byte by byte, the gate to put in CI."""

from __future__ import annotations

from mambaxfer_cli.cli.options import MAX_TP_OPTION, EngineArgs, ModelArgs, OutputArgs, RequestArgs
from mambaxfer_cli.cli.params import ENGINES, command, option
from mambaxfer_cli.cli.report import finish
from mambaxfer_cli.engines import beside
from mambaxfer_cli.engines import chosen as chosen_engines
from mambaxfer_cli.errors import UserError


@command(uses={"output": OutputArgs.without("output")})
def check(
    model: ModelArgs,
    engines: EngineArgs,
    request: RequestArgs,
    output: OutputArgs,
    pairs: str | None = option(
        "--pairs", help="Pairings of TP sizes to check, P:D, comma-separated: 1:4,4:1 checks P TP 1 → D TP 4 and "
                        "P TP 4 → D TP 1.", panel=ENGINES),
    max_tp: int | None = MAX_TP_OPTION,
) -> None:
    """Will these P/D pairings work? Each pairing's transfer is simulated on real bytes and every
    byte and descriptor ID verified: mambaxfer's exact plan, and the reads vLLM issues or the
    writes SGLang posts.

    With --engine sglang: SGLang's writes, proven the same way.

    [bold]Examples[/]

    mambaxfer check --model granite-4.0-h-tiny --pairs 1:2,2:1

    mambaxfer check --model granite-4.0-h-tiny --pairs 1:2 --semantics vllm

    mambaxfer check --all-presets --junit junit.xml

    mambaxfer check --engine sglang --all-presets
    """
    chosen = chosen_engines(engines.engine)
    if len(chosen) == 1:
        finish(chosen[0].check(model, engines, request, output, pairs, max_tp), output)
        return
    if output.junit is not None:
        raise UserError("--junit: check one engine at a time for JUnit (--engine vllm or --engine sglang)")
    finish(beside(engines.engine, lambda first, other: first.check_beside(other, model, engines, request, output,
                                                                          pairs, max_tp)), output)
