"""``mambaxfer check``: prove P/D plans byte by byte, the gate to put in CI."""

from __future__ import annotations

from mambaxfer_cli.cli.options import MAX_TP_OPTION, EngineArgs, ModelArgs, OutputArgs, RequestArgs, check_writable
from mambaxfer_cli.cli.params import ENGINES, command, option
from mambaxfer_cli.cli.report import Viewed, finish


@command(uses={"output": OutputArgs.without("output")})
def check(
    model: ModelArgs,
    engines: EngineArgs,
    request: RequestArgs,
    output: OutputArgs,
    pairs: str | None = option("--pairs", help="P:D TP pairs to check, e.g. 1:4,4:1,2:3.", panel=ENGINES),
    max_tp: int | None = MAX_TP_OPTION,
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

    names = model.names()
    specs = [model.load(name) for name in names]
    semantics = request.reads(both=True)
    options = request.plan_options(engines.build(CHECK_NUM_BLOCKS),
                                   semantics="vllm" if semantics == "vllm" else "exact")
    targets = targets_for(specs, pairs, max_tp, semantics)
    if output.junit is not None:   # fail before the run, not after it
        check_writable(output.junit, "--junit")

    from mambaxfer_cli.render.check_view import progress, render_report
    from mambaxfer_cli.render.junit import junit_xml

    with progress() as (on_start, on_result):
        report = run_check(targets, options, on_start, on_result, semantics=semantics)
    finish(Viewed(report, render_report, junit_xml), output)
