"""``bench --engine vllm,sglang``: both engines' transfer of one model and pairing in one run, each
against the machine's one-descriptor limit. Every refusal (a model or pairing one engine does not
serve, a bad option, too little memory) is said before any rank starts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mambaxfer_cli.cli.options import ModelArgs, OutputArgs, PairArgs, RequestArgs, RunArgs
from mambaxfer_cli.cli.params import given
from mambaxfer_cli.cli.report import Report, finish
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG

if TYPE_CHECKING:
    from mambaxfer_cli.cli.options import EngineArgs

# One block per KV-cache group: the request's state, as SGLang's one slot is (unless --request-blocks).
ONE_REQUEST = "1"


def run(model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run_args: RunArgs,
        output: OutputArgs, sweep: str, chart: Path | None) -> None:
    from mambaxfer_cli.bench import sglang as sglang_bench
    from mambaxfer_cli.bench.engines import engines_document
    from mambaxfer_cli.cli.vllm_bench import measure_vllm, prepare_vllm
    from mambaxfer_cli.cli.options import EngineArgs, Semantics, check_bounds
    from mambaxfer_cli.cli.outcome import one_line_when_the_run_fails
    from mambaxfer_cli.cli.sglang import NAME, backend, load
    from mambaxfer_cli.engines.sglang import plan
    from mambaxfer_cli.execute.plan_source import cut_layers
    from mambaxfer_cli.limits import finite_seconds
    from mambaxfer_cli.render.bench_view import BenchProgress

    if request.semantics not in (None, Semantics.exact):
        raise UserError(f"--semantics {request.semantics.value}: with --engine vllm,sglang both engines move "
                        f"mambaxfer's exact descriptors; bench one engine for its own (--engine vllm --semantics "
                        f"vllm, --engine sglang --semantics sglang)")
    backend(EngineArgs(engine=NAME, transfer_backend=engines.transfer_backend))   # vLLM's flags are vLLM's
    p_tp, d_tp = pair.p_tp or 0, pair.d_tp or 0
    check_bounds(p_tp=p_tp, d_tp=d_tp, layers=run_args.layers, iters=run_args.iters)
    finite_seconds("--timeout", run_args.timeout)
    if not given("sweep"):
        sweep = ONE_REQUEST
    if chart is not None and chart.suffix.lower() != ".png":
        raise UserError(f"--chart {chart}: the chart is a PNG; name it *.png")
    # SGLang first: a model or pairing it does not serve is refused before vLLM plans anything.
    planned = plan(cut_layers(load(model), run_args.layers), p_tp, d_tp)
    vllm = prepare_vllm(model, pair, replace(engines, engine="vllm", transfer_backend=None), request, run_args,
                        sweep, chart)
    theirs = [sglang_bench.prepare(planned, Semantics.exact.value, kind, gpus, run_args.iters)
              for kind, gpus in vllm.devices]
    with one_line_when_the_run_fails(), BenchProgress(vllm.steps + len(theirs)) as view:
        ours = measure_vllm(vllm, run_args, view)
        documents = []
        for prepared in theirs:
            view.start(f"{prepared.settings.device} SGLang one slot")
            documents.append(sglang_bench.measure(prepared, run_args.timeout, view.update))
            view.advance()
    finish(EnginesBenchReport(engines_document(ours, documents), chart, model.model or "", p_tp, d_tp), output)


class EnginesBenchReport(Report):
    """Both engines' figures side by side; the chart written after them; wrong bytes said last."""

    def __init__(self, document: dict[str, Any], chart: Path | None, model: str, p_tp: int, d_tp: int) -> None:
        super().__init__(document, EXIT_OK if document["verified"] else EXIT_WRONG)
        self.chart, self.model, self.pair = chart, model, f"{p_tp}:{d_tp}"

    def render(self, width: int) -> list[Any]:
        from mambaxfer_cli.render.bench_view import engines_tables

        return list(engines_tables(self.document))

    def notes(self) -> list[str]:
        from mambaxfer_cli.bench.engines import wrong_bytes, write_engines_chart

        notes = []
        if self.chart is not None:
            why = write_engines_chart(self.document, self.chart)
            notes.append(f"chart skipped: {why}" if why else f"chart written to {self.chart}")
        if not self.document["verified"]:
            notes.append(f"wrong bytes: {wrong_bytes(self.document)} over the runs marked WRONG; mambaxfer's exact "
                         f"plan landed them wrong; 'mambaxfer check --engine vllm,sglang --model {self.model} "
                         f"--pairs {self.pair}' says which")
        return notes
