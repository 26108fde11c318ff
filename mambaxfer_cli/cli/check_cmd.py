"""``mambaxfer check``: prove P/D plans byte by byte, the gate to put in CI."""

from __future__ import annotations

from mambaxfer_cli.cli.options import MAX_TP_OPTION, EngineArgs, ModelArgs, OutputArgs, RequestArgs, check_writable
from mambaxfer_cli.cli.params import ENGINES, command, option
from mambaxfer_cli.cli.report import Viewed, finish
from mambaxfer_cli.errors import UserError


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
    wrong (one line each, with the fix); 2: a usage error; 70: an internal error. With --engine
    sglang: SGLang's writes, proven the same way.

    [bold]Examples[/]

    mambaxfer check --model granite-4.0-h-tiny --pairs 1:2,2:1

    mambaxfer check --model granite-4.0-h-tiny --pairs 1:2 --semantics vllm

    mambaxfer check --all-presets --junit junit.xml

    mambaxfer check --engine sglang --all-presets
    """
    named = [name.strip().lower() for name in engines.engine.split(",")]
    if named == ["sglang"]:
        from mambaxfer_cli.engines.sglang.commands import answers as sglang

        finish(sglang.check_report(model, engines, request, pairs, max_tp), output)
        return
    if sorted(named) == ["sglang", "vllm"]:
        from mambaxfer_cli.engines.sglang.commands import answers as sglang

        if output.junit is not None:
            raise UserError("--junit: check one engine at a time for JUnit (--engine vllm or --engine sglang)")
        finish(sglang.side_by_side(model, engines, request, pairs, max_tp,
                                   lambda chosen: vllm_check(model, chosen, request, pairs, max_tp, None)), output)
        return
    finish(vllm_check(model, engines, request, pairs, max_tp, output.junit), output)


def vllm_check(model: ModelArgs, engines: EngineArgs, request: RequestArgs, pairs: str | None,
               max_tp: int | None, junit):
    """vLLM's check of the models and pairings: the report ``finish`` says."""
    from mambaxfer_cli.proof import CHECK_NUM_BLOCKS
    from mambaxfer_cli.engines.vllm.proof.check import run_check, targets_for

    names = model.names()
    built = engines.build(CHECK_NUM_BLOCKS)
    specs = [model.load(name, built.release_names) for name in names]
    semantics = request.reads(both=True)
    options = request.plan_options(built,
                                   semantics="vllm" if semantics == "vllm" else "exact")
    targets = targets_for(specs, pairs, max_tp, semantics)
    if junit is not None:   # fail before the run, not after it
        check_writable(junit, "--junit")

    from mambaxfer_cli.engines.vllm.views.check import render_report
    from mambaxfer_cli.render.run_view import progress
    from mambaxfer_cli.engines.vllm.views.junit import junit_xml

    with progress() as (on_start, on_result):
        report = run_check(targets, options, on_start, on_result, semantics=semantics)
    return Viewed(report, render_report, junit_xml)
