"""A toy serving engine that proves the seam: it moves each request's whole SSM state, one WRITE
per layer per D rank, and answers ``plan``, ``check``, ``execute`` and ``bench`` through the
``ServingEngine`` protocol alone. The tests install it as a distribution (``mambaxfer.engines``).

- ``plan``: its writes; ``check``: its byte-level proof in numpy;
- ``transfer``: its rank programs, run through the shared coordinator;
- ``views``: its reports; ``commands``: each command's body.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from mambaxfer_cli.errors import UserError

if TYPE_CHECKING:
    from pathlib import Path

    from mambaxfer_cli.cli.execute_cmd import PeerArgs
    from mambaxfer_cli.cli.options import EngineArgs, ModelArgs, OutputArgs, PairArgs, RequestArgs, RunArgs
    from mambaxfer_cli.engines import PreparedBench, ServingEngine
    from mambaxfer_cli.render.report import Report


def _unanswered(*_: object) -> NoReturn:
    raise UserError("toy answers plan, check, execute and bench only")


class Toy:
    name = "toy"
    title = "Toy"
    unanswered = None

    def release_names(self) -> tuple[str, ...]:
        return ("0",)

    def option_help(self) -> dict[str, str]:
        return {}

    def option_values(self) -> dict[str, tuple[str, ...]]:
        return {}

    def plan(self, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs,
             output: OutputArgs, d_rank: int | None, show: str | None) -> Report:
        from toy_engine.commands import plan_report

        return plan_report(model, pair, d_rank, show)

    def check(self, model: ModelArgs, engines: EngineArgs, request: RequestArgs, output: OutputArgs,
              pairs: str | None, max_tp: int | None) -> Report:
        from toy_engine.commands import check_report

        return check_report(model, pairs, max_tp)

    def execute(self, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run: RunArgs,
                peers: PeerArgs, output: OutputArgs, blocks: int | None, plan_file: Path | None) -> Report:
        from toy_engine.commands import run_report

        return run_report(model, pair, run, 1)

    def bench(self, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run: RunArgs,
              sweep: str, chart: Path | None) -> Report:
        from toy_engine.commands import run_report

        return run_report(model, pair, run, run.iters)

    def check_beside(self, other: ServingEngine, *_: object) -> Report | None:
        _unanswered()

    def bench_beside(self, other: ServingEngine, *_: object) -> Report | None:
        _unanswered()

    def prepare_bench(self, *_: object) -> PreparedBench:
        _unanswered()

    inspect = preflight = conformance = runs = models = staticmethod(_unanswered)


ENGINE: ServingEngine = Toy()
