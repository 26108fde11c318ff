"""``mambaxfer execute``: the plan performed with real NIXL READs between real rank processes."""

from __future__ import annotations

import secrets
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from mambaxfer_cli.cli.outcome import keep_exit_code
from mambaxfer_cli.cli.options import (
    ServingEngineOpt,
    BackendOpt, BlockSizeOpt, CoalesceOpt, ConvDtypeOpt, EngineOption, GdnBackendOpt, GpuOpt, HeadSizeOpt,
    KvDtypeOpt, KvHeadsOpt, MODEL_HELP, ModelOption, NumSpecOpt, OutputOption, PrefixOpt, RequestOption, Semantics,
    SsmDtypeOpt, VariantOpt, VllmVersionOpt, check_bounds, engines, load, stamped,
)
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import EXIT_OK, EXIT_RUN_FAILED, EXIT_WRONG
from mambaxfer_cli.limits import finite_seconds

if TYPE_CHECKING:
    from mambaxfer_cli.execute.discovery import Discovery
    from mambaxfer_cli.execute.tasks import RunSettings
    from mambaxfer_cli.engines.vllm.plan import Plan


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Role(str, Enum):
    prefill = "prefill"
    decode = "decode"


class ExecuteFormat(str, Enum):
    table = "table"
    json = "json"


def execute(
    model: Annotated[Optional[str], ModelOption(
        "--model", "-m", help=MODEL_HELP + " Optional with --plan.", show_default=False)] = None,
    p_tp: Annotated[Optional[int], EngineOption("--p-tp", help="Prefill (P) TP size.", show_default=False)] = None,
    d_tp: Annotated[Optional[int], EngineOption("--d-tp", help="Decode (D) TP size.", show_default=False)] = None,
    device: Annotated[Device, EngineOption(
        "--device", help="cuda: VRAM on the visible GPUs; cpu: DRAM over UCX; auto: cuda when available.",
        case_sensitive=False)] = Device.auto,
    semantics: Annotated[Optional[Semantics], RequestOption(
        "--semantics", help="exact (default): mambaxfer's unit-exact reads; vllm: what vLLM issues.",
        case_sensitive=False, show_default=False)] = None,
    coalesce: CoalesceOpt = False,
    layers: Annotated[Optional[int], ModelOption(
        "--layers", help="Use only the model's first N cache-keeping layers (fewer KV-cache tensors). "
                         "Default: all.", show_default=False)] = None,
    blocks: Annotated[Optional[int], EngineOption(
        "--blocks", help="Logical blocks per engine (pages per SSM tensor). Default: twice what the request "
                         "needs.", show_default=False)] = None,
    serving_engine: ServingEngineOpt = "vllm",
    vllm_version: VllmVersionOpt = None,
    gpu: GpuOpt = None,
    gdn_prefill_backend: GdnBackendOpt = None,
    attention_backend: BackendOpt = None,
    block_size: BlockSizeOpt = None,
    kv_cache_dtype: KvDtypeOpt = None,
    enable_prefix_caching: PrefixOpt = None,
    request_blocks: Annotated[int, RequestOption(
        "--request-blocks", help="Logical blocks per KV-cache group in the request, at random, "
                                 "non-contiguous block IDs on each side.")] = 2,
    iters: Annotated[int, RequestOption("--iters", help="Post the READs this many times (time = median).")] = 3,
    seed: Annotated[int, RequestOption("--seed", help="Seed of the request's block IDs.")] = 0,
    timeout: Annotated[float, RequestOption(
        "--timeout", help="Stop the run after this many seconds without progress (no rank working or "
                          "reaching a new step).")] = 120.0,
    fmt: Annotated[ExecuteFormat, OutputOption(
        "--format", "-f", help="table, or json (mambaxfer.execute/v1).")] = ExecuteFormat.table,
    plan_file: Annotated[Optional[Path], ModelOption(
        "--plan", help="Execute this 'mambaxfer plan --output' document instead of planning again.",
        show_default=False)] = None,
    host: Annotated[str, EngineOption("--host", help="Address the P ranks' side channels listen on.")] = "127.0.0.1",
    port: Annotated[int, EngineOption(
        "--port", help="P rank r's side channel listens on PORT + r; 0: free ports.")] = 0,
    role: Annotated[Optional[Role], EngineOption(
        "--role", help="Two hosts: run only this side's ranks here; the other side runs its own command. "
                       "Default: both sides on this host.", case_sensitive=False, show_default=False)] = None,
    listen: Annotated[Optional[str], EngineOption(
        "--listen", help="--role prefill: P rank r runs NIXL's listener on PORT + r; HOST is the address the "
                         "decode side reaches.", metavar="HOST:PORT", show_default=False)] = None,
    peer: Annotated[Optional[str], EngineOption(
        "--peer", help="--role decode: the prefill side's --listen address.", metavar="HOST:PORT",
        show_default=False)] = None,
    etcd: Annotated[Optional[str], EngineOption(
        "--etcd", help="Both roles: find the other side through NIXL's etcd backend at these client URLs "
                       "(comma-separated); needs --run-id.", metavar="ENDPOINTS", show_default=False)] = None,
    run_id: Annotated[Optional[str], EngineOption(
        "--run-id", help="With --etcd: the run's name, the same on both sides.", show_default=False)] = None,
    variant: VariantOpt = None,
    conv_dtype: ConvDtypeOpt = None,
    ssm_dtype: SsmDtypeOpt = None,
    num_spec: NumSpecOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_size: HeadSizeOpt = None,
) -> None:
    """Run P and D ranks as processes with real NIXL agents, READ the plan's descriptor IDs, verify every byte.

    Exit 0: all verified; 1: wrong bytes; 2: user error; 3: the run failed; 70: an internal error;
    130: interrupted (every rank is stopped).

    [bold]Examples[/]

    mambaxfer execute --model jamba --p-tp 1 --d-tp 4 --device cpu

    mambaxfer execute --plan plan.json --device cpu
    """
    import importlib.util

    from mambaxfer_cli.cli.outcome import red_line
    from mambaxfer_cli.execute.coordinator import RunFailure
    from mambaxfer_cli.execute.run import execute as run
    from mambaxfer_cli.execute.device import resolve_device
    from mambaxfer_cli.execute.nixl_api import INSTALL_HINT
    from mambaxfer_cli.execute.tasks import RunSettings

    if not 0 <= port <= 65535:
        raise UserError(f"--port {port}: not a port number (0..65535)")
    check_bounds(p_tp=p_tp, d_tp=d_tp, layers=layers, blocks=blocks, request_blocks=request_blocks, iters=iters,
                 seed=seed)
    finite_seconds("--timeout", timeout)
    _check_local_host(host)
    from mambaxfer_cli.execute.discovery import resolve

    discovery = resolve(role and role.value, listen, peer, etcd, run_id)
    if discovery is not None and (host, port) != ("127.0.0.1", 0):
        raise UserError("--host/--port place the one-host side channel; with --role use --listen/--peer or --etcd")
    given = {"--vllm-version": vllm_version, "--gpu": gpu, "--gdn-prefill-backend": gdn_prefill_backend,
             "--attention-backend": attention_backend, "--block-size": block_size,
             "--kv-cache-dtype": kv_cache_dtype, "--enable-prefix-caching": enable_prefix_caching}
    if plan_file is not None:
        _engines_fixed(given)
        engine = None
    else:
        engine = engines(engine=serving_engine,
                         vllm_version=vllm_version, gpu=gpu, gdn_prefill_backend=gdn_prefill_backend,
                         attention_backend=attention_backend, block_size=block_size, kv_cache_dtype=kv_cache_dtype,
                         enable_prefix_caching=enable_prefix_caching).decode
    plan = _plan(model, p_tp, d_tp, semantics, coalesce, layers, blocks, engine, request_blocks,
                 seed, plan_file, variant, conv_dtype, ssm_dtype, num_spec, kv_heads, head_size)
    kind, gpus = resolve_device(device.value)
    if plan_file is not None:     # its blocks come from the plan: the advice names plan's options
        from mambaxfer_cli.execute.tasks import check_fits

        check_fits(plan, kind, "plan it again with fewer --p-num-blocks/--d-num-blocks")
    if importlib.util.find_spec("nixl") is None:
        raise UserError(f"NIXL is not installed; {INSTALL_HINT}")
    if discovery is None:
        settings = RunSettings(secrets.token_hex(4), kind, gpus, host, port, iters)
    else:
        settings = _two_host_settings(plan, discovery, kind, gpus, iters)

    from mambaxfer_cli.render.execute_view import (
        ProgressView, corruption_report, result_table, served_table, side_line, title,
    )

    if discovery is not None:
        typer.echo(side_line(plan, discovery), err=True)
    with ProgressView(title(plan, kind, discovery)) as view:
        try:
            outcome = run(plan, settings, timeout, view.update)
        except RunFailure as exc:
            red_line(str(exc))   # one red line, with the run's own exit code
            raise typer.Exit(EXIT_RUN_FAILED) from None
    keep_exit_code(EXIT_OK if outcome.verified else EXIT_WRONG)
    if fmt is ExecuteFormat.json:
        import json

        typer.echo(json.dumps(stamped({**outcome.to_dict(), **plan.engines.to_dict()}), indent=2))
    else:
        from mambaxfer_cli.render.console import console, fit

        out = console()
        out.print(served_table(outcome) if discovery is not None and discovery.role == "prefill"
                  else fit(result_table(outcome)))
        report = corruption_report(outcome)
        if report is not None:
            out.print(report)
    if not outcome.verified:
        raise typer.Exit(EXIT_WRONG)


def _engines_fixed(given: dict) -> None:
    """A plan file fixes both engines (their release, GPU and flags): options that would change them
    are the user's mistake, said before anything runs."""
    named = [flag for flag, value in given.items() if value is not None]
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


def _plan(model, p_tp, d_tp, semantics, coalesce, layers, blocks, engine, request_blocks, seed,
          plan_file, variant, conv_dtype, ssm_dtype, num_spec, kv_heads, head_size):
    from mambaxfer_cli.execute.plan_source import cut_layers, load_plan_file, plan_to_execute

    if plan_file is None:
        missing = [flag for flag, value in (("--model", model), ("--p-tp", p_tp), ("--d-tp", d_tp)) if value is None]
        if missing:
            raise UserError(f"execute needs {', '.join(missing)} (or --plan FILE)")
        spec = cut_layers(load(model, variant, conv_dtype, ssm_dtype, num_spec, kv_heads, head_size), layers)
        return plan_to_execute(spec, p_tp, d_tp, semantics=(semantics or Semantics.exact).value,
                               coalesce=coalesce, blocks=blocks, engine=engine,
                               request_blocks=request_blocks, seed=seed)
    fixed = [flag for flag, given in (("--layers", layers is not None), ("--blocks", blocks is not None),
                                      ("--coalesce", coalesce)) if given]
    if fixed:
        raise UserError(f"{', '.join(fixed)}: the plan file fixes the model's layers, engines and reads; "
                        f"plan again with those options instead")
    plan = load_plan_file(plan_file, model, {"variant": variant, "conv_dtype": conv_dtype,
                                             "ssm_dtype": ssm_dtype, "num_spec": num_spec,
                                             "kv_heads": kv_heads, "head_size": head_size})
    for flag, given, actual in (("--p-tp", p_tp, plan.prefill.tp), ("--d-tp", d_tp, plan.decode.tp),
                                ("--semantics", semantics and semantics.value, plan.semantics)):
        if given is not None and given != actual:
            raise UserError(f"{flag} {given} does not match --plan {plan_file}, which has {actual}")
    return plan
