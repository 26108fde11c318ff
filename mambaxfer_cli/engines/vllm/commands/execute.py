"""``execute`` for vLLM: the plan performed with real NIXL READs between real rank processes."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mambaxfer_cli.cli.options import (EngineArgs, ModelArgs, OutputArgs, PairArgs, RequestArgs, RunArgs, Semantics,
                                       check_bounds, need_nixl, needed)
from mambaxfer_cli.cli.params import given_flags
from mambaxfer_cli.engines.vllm.commands import served
from mambaxfer_cli.engines.vllm.options import build
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG
from mambaxfer_cli.limits import finite_seconds
from mambaxfer_cli.render.report import AsIs, Report

if TYPE_CHECKING:
    from mambaxfer_cli.cli.execute_cmd import PeerArgs
    from mambaxfer_cli.execute.discovery import Discovery
    from mambaxfer_cli.execute.tasks import RunSettings
    from mambaxfer_cli.engines.vllm.plan import Plan


def execute(model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run: RunArgs,
            peers: PeerArgs, output: OutputArgs, blocks: int | None, plan_file: Path | None) -> Report:
    from mambaxfer_cli.cli.outcome import one_line_when_the_run_fails
    from mambaxfer_cli.engines.vllm.transfer.run import execute as perform
    from mambaxfer_cli.execute.tasks import RunSettings

    check_bounds(p_tp=pair.p_tp, d_tp=pair.d_tp, layers=run.layers, blocks=blocks,
                 request_blocks=request.request_blocks, iters=run.iters, seed=request.seed)
    finite_seconds("--timeout", run.timeout)
    discovery = peers.discovery()
    if plan_file is not None:     # options that would change what the plan file fixes are the user's mistake
        engine = [flag for flag, value in given_flags(engines, (*EngineArgs.SHARED, "speculative_config")).items()
                  if value is not None and flag != "--engine"]
        planned = [flag for flag, given in (("--layers", run.layers is not None), ("--blocks", blocks is not None),
                                            ("--coalesce", request.coalesce)) if given]
        for named, what in ((engine, "both engines (vLLM release, GPU and flags)"),
                            (planned, "the model's layers, engines and reads")):
            if named:
                raise UserError(f"{', '.join(named)}: the plan file fixes {what}; plan again with those options "
                                f"instead")
    plan = _plan(model, pair, engines, request, run.layers, blocks, plan_file)
    kind, gpus = run.device_one()
    if plan_file is not None:     # its blocks come from the plan: the advice names plan's options
        from mambaxfer_cli.engines.vllm.transfer.tasks import check_fits

        check_fits(plan, kind, "plan it again with fewer --p-num-blocks/--d-num-blocks")
    need_nixl()
    settings = (RunSettings(secrets.token_hex(4), kind, gpus, peers.host, peers.port, run.iters) if discovery is None
                else _two_host_settings(plan, discovery, kind, gpus, run.iters))

    from mambaxfer_cli.engines.vllm.views.execute import title
    from mambaxfer_cli.render.run_view import ProgressView, two_host_line

    if discovery is not None:     # D reads
        typer.echo(two_host_line(discovery, plan.prefill.tp, plan.decode.tp, "read from the prefill side"), err=True)
    with one_line_when_the_run_fails(), ProgressView(title(plan, kind, discovery)) as view:
        outcome = perform(plan, settings, run.timeout, view.update)
    return ExecuteReport(outcome, plan, discovery)


class ExecuteReport(Report):
    """A run: verified or not; the prefill side of two hosts shows what it served."""

    def __init__(self, outcome, plan: Plan, discovery: Discovery | None) -> None:
        verdict = plan.verdict.to_dict()
        vllm = {key: verdict[key] for key in ("releases", "accepts", "refusals")}
        super().__init__({**outcome.to_dict(), **plan.engines.to_dict(), "vllm": vllm},
                         EXIT_OK if outcome.verified else EXIT_WRONG)
        self.outcome, self.discovery, self.plan = outcome, discovery, plan

    def render(self, width: int) -> list:
        from mambaxfer_cli.engines.vllm.views.execute import (
            corruption_report, refused_line, result_table, served_table, undrafted_line,
        )

        served = self.discovery is not None and self.discovery.role == "prefill"
        parts: list = [line for line in (refused_line(self.plan), undrafted_line(self.plan)) if line is not None]
        parts.append(AsIs(served_table(self.outcome)) if served else result_table(self.outcome))
        report = corruption_report(self.outcome)
        return parts if report is None else [*parts, AsIs(report)]


def _two_host_settings(plan: Plan, discovery: Discovery, device: str, gpus: int, iters: int) -> RunSettings:
    """This side's settings: the discovery checked before any rank starts, and the plan's geometry."""
    from mambaxfer_cli.execute.discovery import check_etcd, check_listen
    from mambaxfer_cli.engines.vllm.transfer.agreement import geometry
    from mambaxfer_cli.execute.tasks import RunSettings

    if discovery.mode == "etcd":
        check_etcd(discovery)
    elif discovery.role == "prefill":
        check_listen(discovery, plan.prefill.tp)
    return RunSettings(discovery.run_id, device, gpus, discovery.host, discovery.port, iters,
                       discovery=discovery, geometry=geometry(plan))


def _plan(model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, layers: int | None,
          blocks: int | None, plan_file: Path | None):
    from mambaxfer_cli.engines.vllm.transfer.plan_source import load_plan_file, plan_to_execute
    from mambaxfer_cli.execute.tasks import cut_layers

    if plan_file is None:
        built = build(engines)
        engine = built.decode
        p_tp, d_tp = needed(model, pair, " (or --plan FILE)")
        full = served(model, engines, built, (engine.release.name,))    # the draft layers move with the target's
        plan = plan_to_execute(cut_layers(full, layers), p_tp, d_tp,
                               semantics=request.reads(default=Semantics.vllm.value),
                               coalesce=request.coalesce, blocks=blocks, engine=engine,
                               request_blocks=request.request_blocks, seed=request.seed)
        if layers is None:
            return plan
        # vLLM's verdict is the deployment's: the whole model's, not the cut's (a cut without
        # attention layers is no model vLLM serves).
        from dataclasses import replace

        from mambaxfer_cli.engines.vllm.plan import PlanOptions, build_plan

        whole = build_plan(full, p_tp, d_tp, PlanOptions(semantics=plan.semantics, prefill=engine, decode=engine))
        return replace(plan, verdict=whole.verdict)
    plan = load_plan_file(plan_file, model.model, model.overrides())
    semantics = request.semantics and request.reads()
    for flag, given, actual in (("--p-tp", pair.p_tp, plan.prefill.tp), ("--d-tp", pair.d_tp, plan.decode.tp),
                                ("--semantics", semantics, plan.semantics)):
        if given is not None and given != actual:
            raise UserError(f"{flag} {given} does not match --plan {plan_file}, which has {actual}")
    return plan
