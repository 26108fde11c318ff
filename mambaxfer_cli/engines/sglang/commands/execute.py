"""``execute --engine sglang``: the options SGLang's transfer reads and refuses, the run and its report;
with ``--role prefill|decode`` one side of it on this host (``engines/sglang/transfer/remote.py``)."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any, Callable

from mambaxfer_cli.cli.options import (
    ModelArgs, PairArgs, RequestArgs, RunArgs, Semantics, check_bounds, need_nixl, needed, refuse_value,
)
from mambaxfer_cli.cli.outcome import one_line_when_the_run_fails
from mambaxfer_cli.cli.params import given
from mambaxfer_cli.engines.sglang.commands.answers import backend, draft, load
from mambaxfer_cli.execute.tasks import RunSettings, cut_layers
from mambaxfer_cli.limits import finite_seconds
from mambaxfer_cli.render.report import AsIs, Report
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG

if TYPE_CHECKING:
    from mambaxfer_cli.cli.options import EngineArgs
    from mambaxfer_cli.engines.sglang.plan import SGLangPlan
    from mambaxfer_cli.engines.sglang.transfer.remote import SideOutcome
    from mambaxfer_cli.engines.sglang.transfer.run import SlotOutcome
    from mambaxfer_cli.execute.discovery import Discovery

# The options execute takes for vLLM that SGLang's transfer has no use for, by parameter name.
_VLLM_ONLY = {"blocks": "--blocks", "plan_file": "--plan", "coalesce": "--coalesce",
              "request_blocks": "--request-blocks", "seed": "--seed"}


def semantics(request: RequestArgs) -> str:
    """--semantics: sglang (the default: what SGLang moves) or exact (mambaxfer's plan)."""
    if request.semantics is None:
        return Semantics.sglang.value
    if request.semantics not in (Semantics.exact, Semantics.sglang):
        raise refuse_value("semantics", request.semantics, ("exact", "sglang"))
    return request.semantics.value


def run(model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run_args: RunArgs,
        host: str, port: int, check_peers: Callable[[], Discovery | None]) -> Report:
    """``check_peers``: --host and --port checked, and the two-host discovery (execute's own)."""
    from mambaxfer_cli.engines.sglang.plan import plan
    from mambaxfer_cli.engines.sglang.transfer.run import execute
    from mambaxfer_cli.render.run_view import ProgressView
    from mambaxfer_cli.engines.sglang.views.execute import title

    named = [flag for name, flag in _VLLM_ONLY.items() if given(name)]     # a default the command sets is not given
    if named:
        raise UserError(f"{', '.join(named)}: {'these apply' if len(named) > 1 else 'it applies'} to vLLM's block "
                        f"reads; SGLang's transfer moves one slot per request (--engine sglang)")
    discovery = check_peers()
    backend(engines)
    chosen = semantics(request)
    check_bounds(p_tp=pair.p_tp, d_tp=pair.d_tp, layers=run_args.layers, iters=run_args.iters)
    finite_seconds("--timeout", run_args.timeout)
    p_tp, d_tp = needed(model, pair)
    spec = cut_layers(load(model), run_args.layers)
    planned = plan(spec, p_tp, d_tp, draft=draft(spec, engines))
    kind, gpus = run_args.device_one()
    need_nixl()
    if discovery is not None:
        return run_side(planned, chosen, discovery, kind, gpus, run_args)
    settings = RunSettings(secrets.token_hex(4), kind, gpus, host, port, run_args.iters)
    with one_line_when_the_run_fails(), ProgressView(title(planned, chosen, kind)) as view:
        outcome = execute(planned, chosen, settings, run_args.timeout, view.update)
    return SGLangExecuteReport(outcome)


class SGLangExecuteReport(Report):
    """A run of SGLang's transfer: verified, or the bad bytes per D rank beside check's."""

    def __init__(self, outcome: SlotOutcome) -> None:
        super().__init__(outcome.to_dict(), EXIT_OK if outcome.verified else EXIT_WRONG)
        self.outcome = outcome

    def render(self, width: int) -> list[Any]:
        from mambaxfer_cli.engines.sglang.views.execute import bad_bytes_report, result_table

        report = bad_bytes_report(self.outcome)
        return [result_table(self.outcome)] if report is None else [result_table(self.outcome), AsIs(report)]


def run_side(planned: SGLangPlan, chosen: str, discovery: Discovery, device: str, gpus: int,
             run_args: RunArgs) -> Report:
    """This side's ranks, to their end; its report (exit 0, 1 with bad bytes, 2 refused, 3 failed)."""
    import typer

    from mambaxfer_cli.engines.sglang.transfer.remote import execute_side, settings_for
    from mambaxfer_cli.render.run_view import ProgressView, two_host_line
    from mambaxfer_cli.engines.sglang.views.execute import title

    settings = settings_for(planned, chosen, discovery, device, gpus, run_args.iters)
    typer.echo(two_host_line(discovery, planned.p_tp, planned.d_tp, "receive the prefill side's WRITEs"), err=True)
    view_title = f"{title(planned, chosen, device)}, {discovery.role} side"
    with one_line_when_the_run_fails(), ProgressView(view_title) as view:
        outcome = execute_side(planned, chosen, settings, run_args.timeout, view.update)
    return SideReport(outcome)


class SideReport(SGLangExecuteReport):
    """The decode side: one host's table, its bad bytes; the prefill side: what it wrote, and what
    each D rank answered (its exit code is theirs)."""

    outcome: SideOutcome

    def render(self, width: int) -> list[Any]:
        from mambaxfer_cli.engines.sglang.views.execute import written_table

        if self.outcome.role == "prefill":
            return [AsIs(written_table(self.outcome))]
        parts = super().render(width)
        parts[0].title = f"{parts[0].title}, decode side"
        return parts
