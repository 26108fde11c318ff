"""``bench --engine sglang``: the options SGLang's WRITE bench reads and the ones it refuses (vLLM's
request sizes, chart and engine flags), the run, and its report."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mambaxfer_cli.cli.params import given
from mambaxfer_cli.cli.options import (
    EngineArgs, ModelArgs, PairArgs, RequestArgs, RunArgs, Semantics, check_bounds, need_nixl,
)
from mambaxfer_cli.cli.outcome import one_line_when_the_run_fails
from mambaxfer_cli.engines.sglang.commands.answers import NAME, backend, draft, load
from mambaxfer_cli.execute.tasks import cut_layers
from mambaxfer_cli.limits import finite_seconds
from mambaxfer_cli.render.report import Report, chart_notes, check_chart
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG

if TYPE_CHECKING:
    from mambaxfer_cli.engines import ServingEngine

# One block per KV-cache group: the request's state, as SGLang's one slot is (unless --request-blocks).
ONE_REQUEST = "1"

_VLLM_ONLY = {"sweep": "--request-blocks", "chart": "--chart", "seed": "--seed"}


def run(model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run_args: RunArgs) -> Report:
    from mambaxfer_cli.engines.sglang.transfer.bench import measure, prepare
    from mambaxfer_cli.engines.sglang.commands.execute import semantics
    from mambaxfer_cli.engines.sglang.plan import plan
    from mambaxfer_cli.render.bench_view import BenchProgress

    named = [flag for name, flag in _VLLM_ONLY.items() if given(name)]
    if named:
        raise UserError(f"{', '.join(named)}: vLLM's bench option{'s' if len(named) > 1 else ''}; SGLang moves one "
                        f"slot per request (--engine sglang)")
    backend(engines)
    chosen = semantics(request)
    p_tp, d_tp = pair.p_tp or 0, pair.d_tp or 0
    check_bounds(p_tp=p_tp, d_tp=d_tp, layers=run_args.layers, iters=run_args.iters)
    finite_seconds("--timeout", run_args.timeout)
    spec = cut_layers(load(model), run_args.layers)
    planned = plan(spec, p_tp, d_tp, draft=draft(spec, engines))
    devices = run_args.devices(default="cpu")     # as vLLM's bench: DRAM unless --device says otherwise
    if len(devices) > 1:
        raise UserError(f"--device {run_args.device}: SGLang's bench runs on one device (cpu or cuda); "
                        f"--engine vllm,sglang runs both engines on each")
    kind, gpus = devices[0]
    need_nixl()
    with one_line_when_the_run_fails(), BenchProgress(1) as view:
        view.start(f"{kind} one slot")
        document = measure(prepare(planned, chosen, kind, gpus, run_args.iters), run_args.timeout, view.update)
        view.advance()
    return SGLangBenchReport(document)


class SGLangBenchReport(Report):
    def __init__(self, document: dict[str, Any]) -> None:
        super().__init__(document, EXIT_OK if document["verified"] else EXIT_WRONG)

    def render(self, width: int) -> list[Any]:
        from mambaxfer_cli.engines.sglang.views.execute import bench_table

        return [bench_table(self.document)]

    def notes(self) -> list[str]:
        if self.document["verified"]:
            return []
        wrong = sum(v["wrong_bytes"] for v in self.document["variants"].values())
        how = ("SGLang's own writes (--semantics sglang) land these bytes wrong; 'mambaxfer execute --engine "
               "sglang --semantics sglang' counts them as check does" if self.document["semantics"] == "sglang"
               else "mambaxfer's exact writes landed these bytes wrong")
        return [f"wrong bytes: {wrong} over the variants marked WRONG; {how}"]


def beside(other: ServingEngine, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs,
           run_args: RunArgs, sweep: str, chart: Path | None) -> Report:
    """``bench --engine vllm,sglang``: SGLang's WRITE beside ``other``'s (vLLM's) transfer of one model and
    pairing, each against the one-descriptor limit; every refusal is said before any rank starts."""
    from mambaxfer_cli.engines.sglang.transfer import bench as sglang_bench
    from mambaxfer_cli.engines.sglang.beside import engines_document
    from mambaxfer_cli.engines.sglang.plan import plan
    from mambaxfer_cli.render.bench_view import BenchProgress

    if request.semantics not in (None, Semantics.exact):
        raise UserError(f"--semantics {request.semantics.value}: with --engine vllm,sglang both engines move "
                        f"mambaxfer's exact descriptors; bench one engine for its own (--engine vllm --semantics "
                        f"vllm, --engine sglang --semantics sglang)")
    if engines.speculative_config is not None:
        raise UserError("--speculative-config: with --engine vllm,sglang SGLang's side has no draft to move; "
                        "bench the draft layers with --engine vllm")
    backend(EngineArgs(engine=NAME, transfer_backend=engines.transfer_backend), said=False)   # vLLM's are vLLM's
    p_tp, d_tp = pair.p_tp or 0, pair.d_tp or 0
    check_bounds(p_tp=p_tp, d_tp=d_tp, layers=run_args.layers, iters=run_args.iters)
    finite_seconds("--timeout", run_args.timeout)
    if not given("sweep"):
        sweep = ONE_REQUEST
    check_chart(chart)
    # SGLang first: a model or pairing it does not serve is refused before vLLM plans anything.
    planned = plan(cut_layers(load(model), run_args.layers), p_tp, d_tp)
    vllm = other.prepare_bench(model, pair, replace(engines, engine=other.name, transfer_backend=None),
                               replace(request, semantics=Semantics.exact), run_args, sweep, chart)
    theirs = [sglang_bench.prepare(planned, Semantics.exact.value, kind, gpus, run_args.iters)
              for kind, gpus in vllm.devices]
    with one_line_when_the_run_fails(), BenchProgress(vllm.steps + len(theirs)) as view:
        ours = vllm.measure(run_args, view)
        documents = []
        for prepared in theirs:
            view.start(f"{prepared.settings.device} SGLang one slot")
            documents.append(sglang_bench.measure(prepared, run_args.timeout, view.update))
            view.advance()
    return EnginesBenchReport(engines_document(ours, documents), chart, model.model or "", p_tp, d_tp)


class EnginesBenchReport(Report):
    """Both engines' figures side by side; the chart written after them; wrong bytes said last."""

    def __init__(self, document: dict[str, Any], chart: Path | None, model: str, p_tp: int, d_tp: int) -> None:
        super().__init__(document, EXIT_OK if document["verified"] else EXIT_WRONG)
        self.chart, self.model, self.pair = chart, model, f"{p_tp}:{d_tp}"

    def render(self, width: int) -> list[Any]:
        from mambaxfer_cli.engines.sglang.beside import engines_tables

        return list(engines_tables(self.document))

    def notes(self) -> list[str]:
        from mambaxfer_cli.engines.sglang.beside import wrong_bytes, draw_engines_chart

        notes = chart_notes(draw_engines_chart, self.document, self.chart)
        if not self.document["verified"]:
            notes.append(f"wrong bytes: {wrong_bytes(self.document)} over the runs marked WRONG; mambaxfer's exact "
                         f"plan landed them wrong; 'mambaxfer check --engine vllm,sglang --model {self.model} "
                         f"--pairs {self.pair}' says which")
        return notes
