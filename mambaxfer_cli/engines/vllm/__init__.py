"""vLLM as the serving engine of P and D: its NIXL connector's rules, release by release (which
module holds what: docs/architecture.md). Nothing is imported until a question needs it, so
naming the engine costs the command line nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from mambaxfer_cli.engines import ServingEngine
from mambaxfer_cli.engines.vllm import commands

if TYPE_CHECKING:
    from pathlib import Path

    from mambaxfer_cli.cli.execute_cmd import PeerArgs
    from mambaxfer_cli.cli.options import EngineArgs, ModelArgs, OutputArgs, PairArgs, RequestArgs, RunArgs
    from mambaxfer_cli.engines import PreparedBench
    from mambaxfer_cli.engines.vllm.commands import bench, check, execute, inspect, plan, preflight  # noqa: F401
    from mambaxfer_cli.render.report import Report


class Vllm:
    """The ``ServingEngine`` of vLLM: each command's body in ``commands/``, imported when asked."""

    name = "vllm"
    title = "vLLM"
    unanswered = None

    def release_names(self) -> tuple[str, ...]:
        from mambaxfer_cli.engines.vllm.releases import NAMES

        return NAMES

    def option_help(self) -> dict[str, str]:
        from mambaxfer_cli.engines.vllm.options import option_help

        return option_help()

    def option_values(self) -> dict[str, tuple[str, ...]]:
        from mambaxfer_cli.engines.vllm.gpu import GPUS

        releases = self.release_names()
        return {"gpu": tuple(g.name for g in GPUS), "vllm_version": releases, "p_vllm_version": releases,
                "d_vllm_version": releases}

    def plan(self, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs,
             output: OutputArgs, d_rank: int | None, show: str | None) -> Report:
        return commands.plan.plan(model, pair, engines, request, output, d_rank, show)

    def check(self, model: ModelArgs, engines: EngineArgs, request: RequestArgs, output: OutputArgs,
              pairs: str | None, max_tp: int | None) -> Report:
        return commands.check.check(model, engines, request, output, pairs, max_tp)

    def check_beside(self, other: ServingEngine, model: ModelArgs, engines: EngineArgs, request: RequestArgs,
                     output: OutputArgs, pairs: str | None, max_tp: int | None) -> Report | None:
        return None     # SGLang's package checks itself beside vLLM

    def inspect(self, model: ModelArgs, engines: EngineArgs, tp: str) -> Report:
        return commands.inspect.inspect(model, engines, tp)

    def runs(self, p_text: str, d_text: str, environ: Mapping[str, str]) -> bool:
        return False    # the engine preflight reads lines for when no other's server runs them

    def preflight(self, engines: EngineArgs, output: OutputArgs, p_text: str, d_text: str, p_origin: str,
                  d_origin: str, environ: Mapping[str, str]) -> Report:
        return commands.preflight.preflight(engines, output, p_text, d_text, p_origin, d_origin, environ)

    def execute(self, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run: RunArgs,
                peers: PeerArgs, output: OutputArgs, blocks: int | None, plan_file: Path | None) -> Report:
        return commands.execute.execute(model, pair, engines, request, run, peers, output, blocks, plan_file)

    def bench(self, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run: RunArgs,
              sweep: str, chart: Path | None) -> Report:
        return commands.bench.bench(model, pair, engines, request, run, sweep, chart)

    def prepare_bench(self, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs,
                      run: RunArgs, sweep: str, chart: Path | None) -> PreparedBench:
        return commands.bench.prepare_vllm(model, pair, engines, request, run, sweep, chart)

    def bench_beside(self, other: ServingEngine, model: ModelArgs, pair: PairArgs, engines: EngineArgs,
                     request: RequestArgs, run: RunArgs, sweep: str, chart: Path | None) -> Report | None:
        return None     # SGLang's package benches itself beside vLLM

    def models(self) -> Report:
        from mambaxfer_cli.cli.models_cmd import presets_report
        from mambaxfer_cli.engines.vllm.dtypes import DTYPES

        return presets_report(DTYPES)     # the presets as mambaxfer reads them, in vLLM's dtypes

    def conformance(self, model: ModelArgs, engines: EngineArgs, max_tp: int) -> Report:
        from mambaxfer_cli.engines.vllm.conformance import run
        from mambaxfer_cli.engines.vllm.options import model_names, refuse_sglang_drafts
        from mambaxfer_cli.engines.vllm.views.conformance import junit_xml, progress, render_report
        from mambaxfer_cli.render.report import Viewed

        refuse_sglang_drafts(engines)
        with progress() as (start, done):
            report = run(model_names(model), max_tp, start, done, every_preset=model.all_presets,
                         speculative=engines.speculative_config)
        return Viewed(report, render_report, junit_xml)


ENGINE: ServingEngine = Vllm()
