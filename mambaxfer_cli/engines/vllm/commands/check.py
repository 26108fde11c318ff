"""``check`` for vLLM: its proof of the models and pairings, and the report ``finish`` says."""

from __future__ import annotations

from dataclasses import replace

from mambaxfer_cli.cli.options import EngineArgs, ModelArgs, OutputArgs, RequestArgs, check_writable
from mambaxfer_cli.engines.vllm.options import build, drafted, model_names, plan_options
from mambaxfer_cli.engines import chosen
from mambaxfer_cli.errors import Refused
from mambaxfer_cli.render.report import Viewed


def check(model: ModelArgs, engines: EngineArgs, request: RequestArgs, output: OutputArgs, pairs: str | None,
          max_tp: int | None) -> Viewed:
    """vLLM's check of the models and pairings."""
    from mambaxfer_cli.engines.vllm.gpu import on_gpu
    from mambaxfer_cli.engines.vllm.startup import startup
    from mambaxfer_cli.proof import CHECK_NUM_BLOCKS
    from mambaxfer_cli.engines.vllm.proof.check import run_check, targets_for

    names = model_names(model)
    built = build(engines, CHECK_NUM_BLOCKS)
    from mambaxfer_cli.proof.verdicts import parse_pairs

    sizes = tuple(tp for pair in parse_pairs(pairs) for tp in (pair.p_tp, pair.d_tp)) if pairs else ()
    loaded, refused = [], []
    for name in names:
        try:
            loaded.append(on_gpu(model.load(name, startup(built.release_names, sizes)), built.decode.gpu))
        except Refused as exc:    # --all-presets, or beside another engine: a line of vLLM's report
            if not model.all_presets and len(chosen(engines.engine)) == 1:
                raise
            refused.append(f"{name}: not checked: {exc}")
    specs = drafted(loaded, model, engines, built)
    semantics = request.reads(both=True)
    options = plan_options(request, built, semantics="vllm" if semantics == "vllm" else "exact",
                           speculative=engines.speculative_config)
    targets = targets_for(specs, pairs, max_tp, semantics)
    if output.junit is not None:   # fail before the run, not after it
        check_writable(output.junit, "--junit")

    from mambaxfer_cli.engines.vllm.views.check import junit_xml, render_report
    from mambaxfer_cli.render.run_view import progress

    with progress() as (on_start, on_result):
        report = run_check(targets, options, on_start, on_result, semantics=semantics)
    report = replace(report, unchecked=report.unchecked + tuple(refused))
    return Viewed(report, render_report, junit_xml)
