"""``mambaxfer execute``: the plan performed with real NIXL READs between real rank processes (SGLang's
WRITEs: ``cli/sglang_execute.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mambaxfer_cli.cli.options import (
    EngineArgs, ModelArgs, OutputArgs, PairArgs, RequestArgs, RunArgs, check_bounds,
)
from mambaxfer_cli.cli.params import ENGINES, MODEL, Group, command, given_flags, option
from mambaxfer_cli.cli.report import AsIs, Report, finish
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG
from mambaxfer_cli.limits import finite_seconds

if TYPE_CHECKING:
    from mambaxfer_cli.execute.discovery import Discovery
    from mambaxfer_cli.execute.tasks import RunSettings
    from mambaxfer_cli.engines.vllm.plan import Plan


class Role(str, Enum):
    prefill = "prefill"
    decode = "decode"


@dataclass(frozen=True)
class PeerArgs(Group):
    """Where the ranks find each other: one host's side channel, or two hosts'."""

    host: str = option("--host", help="Address the P ranks' side channels listen on.", panel=ENGINES,
                       default="127.0.0.1")
    port: int = option("--port", help="P rank r's side channel listens on PORT + r; 0: free ports.", panel=ENGINES,
                       default=0)
    role: Role | None = option(
        "--role", help="Two hosts: run only this side's ranks here; the other side runs its own command. "
                       "Default: both sides on this host.", panel=ENGINES)
    listen: str | None = option(
        "--listen", help="--role prefill: P rank r runs NIXL's listener on PORT + r; HOST is the address the "
                         "decode side reaches.", panel=ENGINES, metavar="HOST:PORT")
    peer: str | None = option("--peer", help="--role decode: the prefill side's --listen address.", panel=ENGINES,
                              metavar="HOST:PORT")
    etcd: str | None = option(
        "--etcd", help="Both roles: find the other side through NIXL's etcd backend at these client URLs "
                       "(comma-separated); needs --run-id.", panel=ENGINES, metavar="ENDPOINTS")
    run_id: str | None = option("--run-id", help="With --etcd: the run's name, the same on both sides.",
                                panel=ENGINES)

    def discovery(self) -> Discovery | None:
        """The two-host discovery the options name, checked; None: both sides on this host."""
        from mambaxfer_cli.execute.discovery import resolve

        if not 0 <= self.port <= 65535:
            raise UserError(f"--port {self.port}: not a port number (0..65535)")
        _check_local_host(self.host)
        found = resolve(self.role and self.role.value, self.listen, self.peer, self.etcd, self.run_id)
        if found is not None and (self.host, self.port) != ("127.0.0.1", 0):
            raise UserError("--host/--port place the one-host side channel; with --role use --listen/--peer or "
                            "--etcd")
        return found


@command(uses={"model": ModelArgs.without("all_presets"), "engines": EngineArgs.given(*EngineArgs.SHARED),
               "request": RequestArgs.given("semantics", "coalesce", "request_blocks", "seed"),
               "output": OutputArgs.given("fmt")},
         defaults={"request_blocks": 2})
def execute(
    model: ModelArgs,
    pair: PairArgs,
    engines: EngineArgs,
    request: RequestArgs,
    run: RunArgs,
    peers: PeerArgs,
    output: OutputArgs,
    blocks: int | None = option(
        "--blocks", help="Logical blocks per engine (pages per SSM tensor). Default: twice what the request needs.",
        panel=ENGINES),
    plan_file: Path | None = option(
        "--plan", help="Execute this 'mambaxfer plan --output' document instead of planning again.", panel=MODEL),
) -> None:
    """Run P and D ranks as processes with real NIXL agents, READ the plan's descriptor IDs, verify every byte.

    With --engine sglang: SGLang's transfer, P WRITEs of one slot per entry (--semantics exact or sglang).

    Exit 0: all verified; 1: wrong bytes; 2: user error; 3: the run failed; 70: an internal error;
    130: interrupted (every rank is stopped).

    [bold]Examples[/]

    mambaxfer execute --model jamba --p-tp 1 --d-tp 4 --device cpu

    mambaxfer execute --plan plan.json --device cpu

    mambaxfer execute --engine sglang --model nemotron-h-8b --p-tp 1 --d-tp 2 --semantics sglang
    """
    if engines.engine.strip().lower() == "sglang":
        from mambaxfer_cli.cli import sglang_execute

        sglang_execute.run(model, pair, engines, request, run, peers.host, peers.port, output, peers.discovery)
        return
    import importlib.util
    import secrets

    from mambaxfer_cli.cli.outcome import one_line_when_the_run_fails
    from mambaxfer_cli.execute.run import execute as perform
    from mambaxfer_cli.execute.nixl_api import INSTALL_HINT
    from mambaxfer_cli.execute.tasks import RunSettings

    check_bounds(p_tp=pair.p_tp, d_tp=pair.d_tp, layers=run.layers, blocks=blocks,
                 request_blocks=request.request_blocks, iters=run.iters, seed=request.seed)
    finite_seconds("--timeout", run.timeout)
    discovery = peers.discovery()
    if plan_file is not None:
        _engines_fixed(engines)
        engine = None
    else:
        engine = engines.build().decode
    plan = _plan(model, pair, request, run.layers, blocks, engine, plan_file)
    kind, gpus = run.device_one()
    if plan_file is not None:     # its blocks come from the plan: the advice names plan's options
        from mambaxfer_cli.execute.tasks import check_fits

        check_fits(plan, kind, "plan it again with fewer --p-num-blocks/--d-num-blocks")
    if importlib.util.find_spec("nixl") is None:
        raise UserError(f"NIXL is not installed; {INSTALL_HINT}")
    if discovery is None:
        settings = RunSettings(secrets.token_hex(4), kind, gpus, peers.host, peers.port, run.iters)
    else:
        settings = _two_host_settings(plan, discovery, kind, gpus, run.iters)

    from mambaxfer_cli.render.execute_view import ProgressView, side_line, title

    if discovery is not None:
        typer.echo(side_line(plan, discovery), err=True)
    with one_line_when_the_run_fails(), ProgressView(title(plan, kind, discovery)) as view:
        outcome = perform(plan, settings, run.timeout, view.update)
    finish(ExecuteReport(outcome, plan, discovery), output)


class ExecuteReport(Report):
    """A run: verified or not; the prefill side of two hosts shows what it served."""

    def __init__(self, outcome, plan: Plan, discovery: Discovery | None) -> None:
        verdict = plan.verdict.to_dict()
        vllm = {key: verdict[key] for key in ("releases", "accepts", "refusals")}
        super().__init__({**outcome.to_dict(), **plan.engines.to_dict(), "vllm": vllm},
                         EXIT_OK if outcome.verified else EXIT_WRONG)
        self.outcome, self.discovery, self.plan = outcome, discovery, plan

    def render(self, width: int) -> list:
        from mambaxfer_cli.render.execute_view import corruption_report, refused_line, result_table, served_table

        served = self.discovery is not None and self.discovery.role == "prefill"
        refused = refused_line(self.plan)
        parts: list = [] if refused is None else [refused]
        parts.append(AsIs(served_table(self.outcome)) if served else result_table(self.outcome))
        report = corruption_report(self.outcome)
        return parts if report is None else [*parts, AsIs(report)]


def _engines_fixed(engines: EngineArgs) -> None:
    """A plan file fixes both engines (their release, GPU and flags): options that would change them
    are the user's mistake, said before anything runs."""
    named = [flag for flag, value in given_flags(engines, EngineArgs.SHARED).items()
             if value is not None and flag != "--engine"]
    if named:
        raise UserError(f"{', '.join(named)}: the plan file fixes both engines (vLLM release, GPU and flags); "
                        f"plan again with those options instead")


def _check_local_host(host: str) -> None:
    """The P ranks' side channels listen on --host: it must name an address of this machine."""
    import socket

    shown = host if len(host) <= 80 else f"{host[:77]}..."
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise UserError(f"--host {shown}: unknown host ({getattr(exc, 'strerror', None) or exc})") from None
    for family, _, _, _, address in found:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as sock:
                sock.bind((address[0], 0))
            return
        except OSError:
            continue
    raise UserError(f"--host {shown}: not an address of this machine, so the P ranks cannot listen there; "
                    f"give 127.0.0.1 or one of this machine's own addresses")


def _two_host_settings(plan: Plan, discovery: Discovery, device: str, gpus: int, iters: int) -> RunSettings:
    """This side's settings: the discovery checked before any rank starts, and the plan's geometry."""
    from mambaxfer_cli.execute.discovery import check_etcd, check_listen
    from mambaxfer_cli.execute.agreement import geometry
    from mambaxfer_cli.execute.tasks import RunSettings

    if discovery.mode == "etcd":
        check_etcd(discovery)
    elif discovery.role == "prefill":
        check_listen(discovery, plan.prefill.tp)
    return RunSettings(discovery.run_id, device, gpus, discovery.host, discovery.port, iters,
                       discovery=discovery, geometry=geometry(plan))


def _plan(model: ModelArgs, pair: PairArgs, request: RequestArgs, layers: int | None, blocks: int | None,
          engine, plan_file: Path | None):
    from mambaxfer_cli.execute.plan_source import cut_layers, load_plan_file, plan_to_execute

    if plan_file is None:
        missing = [flag for flag, value in (("--model", model.model), ("--p-tp", pair.p_tp), ("--d-tp", pair.d_tp))
                   if value is None]
        if missing or pair.p_tp is None or pair.d_tp is None:
            raise UserError(f"execute needs {', '.join(missing)} (or --plan FILE)")
        full = model.load(releases=(engine.release.name,) if engine is not None else None)
        plan = plan_to_execute(cut_layers(full, layers), pair.p_tp, pair.d_tp, semantics=request.reads(),
                               coalesce=request.coalesce, blocks=blocks, engine=engine,
                               request_blocks=request.request_blocks, seed=request.seed)
        if layers is None:
            return plan
        # vLLM's verdict is the deployment's: the whole model's, not the cut's (a cut without
        # attention layers is no model vLLM serves).
        from dataclasses import replace

        from mambaxfer_cli.engines.vllm.plan import PlanOptions, build_plan

        whole = build_plan(full, pair.p_tp, pair.d_tp, PlanOptions(semantics=plan.semantics, prefill=engine,
                                                                   decode=engine))
        return replace(plan, verdict=whole.verdict)
    fixed = [flag for flag, given in (("--layers", layers is not None), ("--blocks", blocks is not None),
                                      ("--coalesce", request.coalesce)) if given]
    if fixed:
        raise UserError(f"{', '.join(fixed)}: the plan file fixes the model's layers, engines and reads; "
                        f"plan again with those options instead")
    plan = load_plan_file(plan_file, model.model, model.overrides())
    semantics = request.semantics and request.reads()
    for flag, given, actual in (("--p-tp", pair.p_tp, plan.prefill.tp), ("--d-tp", pair.d_tp, plan.decode.tp),
                                ("--semantics", semantics, plan.semantics)):
        if given is not None and given != actual:
            raise UserError(f"{flag} {given} does not match --plan {plan_file}, which has {actual}")
    return plan
