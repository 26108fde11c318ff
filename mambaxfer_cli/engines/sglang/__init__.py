"""SGLang as an engine: how SGLang 0.5.23's prefill/decode disaggregation moves hybrid-model state
(which module holds what: docs/architecture.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from mambaxfer_cli.engines import ServingEngine
from mambaxfer_cli.engines.sglang import commands
from mambaxfer_cli.engines.sglang.release import RELEASES
from mambaxfer_cli.errors import UserError

if TYPE_CHECKING:
    from pathlib import Path

    from mambaxfer_cli.cli.execute_cmd import PeerArgs
    from mambaxfer_cli.cli.options import EngineArgs, ModelArgs, OutputArgs, PairArgs, RequestArgs, RunArgs
    from mambaxfer_cli.engines import PreparedBench
    from mambaxfer_cli.engines.sglang.commands import answers, bench, execute, preflight  # noqa: F401
    from mambaxfer_cli.render.report import Report


class Sglang:
    """The ``ServingEngine`` of SGLang: each command's body in ``commands/``, imported when asked."""

    name = "sglang"
    title = "SGLang"
    unanswered = None   # every command answers for SGLang 0.5.23

    def release_names(self) -> tuple[str, ...]:
        return tuple(RELEASES)

    def option_help(self) -> dict[str, str]:
        return {}

    def option_values(self) -> dict[str, tuple[str, ...]]:
        return {}

    def plan(self, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs,
             output: OutputArgs, d_rank: int | None, show: str | None) -> Report:
        return commands.answers.plan_report(model, engines, request, pair.p_tp or 0, pair.d_tp or 0, d_rank, show)

    def check(self, model: ModelArgs, engines: EngineArgs, request: RequestArgs, output: OutputArgs,
              pairs: str | None, max_tp: int | None) -> Report:
        return commands.answers.check_report(model, engines, request, pairs, max_tp)

    def check_beside(self, other: ServingEngine, model: ModelArgs, engines: EngineArgs, request: RequestArgs,
                     output: OutputArgs, pairs: str | None, max_tp: int | None) -> Report | None:
        if other.name != "vllm":
            return None
        return commands.answers.side_by_side(other, model, engines, request, output, pairs, max_tp)

    def inspect(self, model: ModelArgs, engines: EngineArgs, tp: str) -> Report:
        return commands.answers.inspect_report(model, engines, tp)

    def runs(self, p_text: str, d_text: str, environ: Mapping[str, str]) -> bool:
        return commands.preflight.runs(p_text, d_text, environ)

    def preflight(self, engines: EngineArgs, output: OutputArgs, p_text: str, d_text: str, p_origin: str,
                  d_origin: str, environ: Mapping[str, str]) -> Report:
        return commands.preflight.preflight(engines, output, p_text, d_text, p_origin, d_origin, environ)

    def execute(self, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run: RunArgs,
                peers: PeerArgs, output: OutputArgs, blocks: int | None, plan_file: Path | None) -> Report:
        return commands.execute.run(model, pair, engines, request, run, peers.host, peers.port, peers.discovery)

    def bench(self, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run: RunArgs,
              sweep: str, chart: Path | None) -> Report:
        return commands.bench.run(model, pair, engines, request, run)

    def prepare_bench(self, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs,
                      run: RunArgs, sweep: str, chart: Path | None) -> PreparedBench:
        raise NotImplementedError("SGLang's bench is one run; beside vLLM it measures its slots itself")

    def bench_beside(self, other: ServingEngine, model: ModelArgs, pair: PairArgs, engines: EngineArgs,
                     request: RequestArgs, run: RunArgs, sweep: str, chart: Path | None) -> Report | None:
        if other.name != "vllm":
            return None
        return commands.bench.beside(other, model, pair, engines, request, run, sweep, chart)

    def models(self) -> Report:
        return commands.answers.models_report()

    def conformance(self, model: ModelArgs, engines: EngineArgs, max_tp: int) -> Report:
        from mambaxfer_cli.engines.sglang.conformance import run

        if engines.speculative_config is not None:
            raise UserError("--speculative-config is vLLM's: SGLang's conformance compares the NEXTN draft "
                            "pool of every model with MTP layers without it, a draft model's with "
                            "--speculative-algorithm and --draft-model (docs/conformance.md)")
        from mambaxfer_cli.engines.sglang.views.conformance import junit_xml, progress, render_report
        from mambaxfer_cli.render.report import Viewed

        with progress() as (start, done):
            report = run(None if model.all_presets else model.names(), max_tp, start, done,
                         engines.speculative_algorithm, engines.speculative_draft_model_path)
        return Viewed(report, render_report, junit_xml)


ENGINE: ServingEngine = Sglang()
