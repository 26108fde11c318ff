"""``bench --engine sglang``: the options SGLang's WRITE bench reads and the ones it refuses (vLLM's
request sizes, chart and engine flags), the run, and its report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mambaxfer_cli.cli.options import ModelArgs, OutputArgs, PairArgs, RequestArgs, RunArgs
from mambaxfer_cli.cli.params import given
from mambaxfer_cli.cli.report import Report, finish
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG

if TYPE_CHECKING:
    from mambaxfer_cli.cli.options import EngineArgs

_VLLM_ONLY = {"sweep": "--request-blocks", "chart": "--chart", "seed": "--seed"}


def run(model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run_args: RunArgs,
        output: OutputArgs) -> None:
    import importlib.util

    from mambaxfer_cli.bench.sglang import bench
    from mambaxfer_cli.cli.options import check_bounds
    from mambaxfer_cli.cli.outcome import one_line_when_the_run_fails
    from mambaxfer_cli.cli.sglang import backend, load
    from mambaxfer_cli.cli.sglang_execute import semantics
    from mambaxfer_cli.engines.sglang import plan
    from mambaxfer_cli.execute.nixl_api import INSTALL_HINT
    from mambaxfer_cli.execute.plan_source import cut_layers
    from mambaxfer_cli.limits import finite_seconds
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
    planned = plan(cut_layers(load(model), run_args.layers), p_tp, d_tp)
    devices = run_args.devices(default="cpu")     # as vLLM's bench: DRAM unless --device says otherwise
    if len(devices) > 1:
        raise UserError(f"--device {run_args.device}: SGLang's bench runs on one device (cpu or cuda); "
                        f"--engine vllm,sglang runs both engines on each")
    kind, gpus = devices[0]
    if importlib.util.find_spec("nixl") is None:
        raise UserError(f"NIXL is not installed; {INSTALL_HINT}")
    with one_line_when_the_run_fails(), BenchProgress(1) as view:
        view.start(f"{kind} one slot")
        document = bench(planned, chosen, kind, gpus, run_args.iters, run_args.timeout, view.update)
        view.advance()
    finish(SGLangBenchReport(document), output)


class SGLangBenchReport(Report):
    def __init__(self, document: dict[str, Any]) -> None:
        super().__init__(document, EXIT_OK if document["verified"] else EXIT_WRONG)

    def render(self, width: int) -> list[Any]:
        from mambaxfer_cli.render.sglang_execute_view import bench_table

        return [bench_table(self.document)]

    def notes(self) -> list[str]:
        if self.document["verified"]:
            return []
        wrong = sum(v["wrong_bytes"] for v in self.document["variants"].values())
        how = ("SGLang's own writes (--semantics sglang) land these bytes wrong; 'mambaxfer execute --engine "
               "sglang --semantics sglang' counts them as check does" if self.document["semantics"] == "sglang"
               else "mambaxfer's exact writes landed these bytes wrong")
        return [f"wrong bytes: {wrong} over the variants marked WRONG; {how}"]
