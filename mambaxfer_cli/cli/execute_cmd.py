"""``mambaxfer execute``: the plan performed with real NIXL READs between real rank processes (SGLang's
WRITEs), as the engine runs it (``engines/<name>/commands/execute.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from mambaxfer_cli.cli.options import (EngineArgs, ModelArgs, OutputArgs, PairArgs, RequestArgs, RunArgs,
                                      a_document_path)
from mambaxfer_cli.cli.params import ENGINES, MODEL, Group, command, option
from mambaxfer_cli.cli.report import finish
from mambaxfer_cli.engines import one
from mambaxfer_cli.errors import UserError

if TYPE_CHECKING:
    from mambaxfer_cli.execute.discovery import Discovery


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


@command(uses={"model": ModelArgs.without("all_presets"),
               "engines": EngineArgs.given(*EngineArgs.ONE_ENGINE),
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
        "--plan", help="Execute this 'mambaxfer plan --output' document instead of planning again ('-': "
                       "standard input).", panel=MODEL, parser=a_document_path, metavar="<path>"),
) -> None:
    """Run P and D ranks as processes with real NIXL agents, move the state as the engine does
    (vLLM's READs, SGLang's WRITEs), verify every byte.

    By default it moves what the engine moves: vLLM's reads (--semantics vllm); with --engine sglang,
    SGLang's WRITEs of one slot per entry (--semantics sglang). --semantics exact moves mambaxfer's plan.

    [bold]Examples[/]

    mambaxfer execute --model jamba --p-tp 1 --d-tp 4 --device cpu

    mambaxfer execute --plan plan.json --device cpu

    mambaxfer execute --engine sglang --model nemotron-h-8b --p-tp 1 --d-tp 2 --semantics exact
    """
    finish(one(engines.engine).execute(model, pair, engines, request, run, peers, output, blocks, plan_file),
           output)


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
