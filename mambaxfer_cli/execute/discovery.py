"""How the two sides of a two-host run find each other through NIXL's metadata exchange: direct
(P rank r's listen thread on ``--listen HOST:PORT`` + r, which a D rank's ``--peer`` names) or
etcd (NIXL's etcd backend, under a namespace of the run id).
"""

from __future__ import annotations

import errno
import re
import socket
from dataclasses import dataclass
from typing import Any

from mambaxfer_cli.errors import UserError

DIRECT_RUN = "direct"          # the run id of a direct run: one run per listen address
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ETCD_PROBE_S = 3.0
ETCD_PREFIX = "/mambaxfer"


@dataclass(frozen=True)
class Discovery:
    role: str              # "prefill" or "decode": the side this command runs
    mode: str              # "direct" or "etcd"
    host: str = ""         # direct: where P rank r's NIXL listener is reached (port + r)
    port: int = 0
    endpoints: str = ""    # etcd: comma-separated client URLs
    run_id: str = DIRECT_RUN

    def environment(self) -> dict[str, str]:
        """What NIXL reads in the rank processes."""
        if self.mode != "etcd":
            return {}
        return {"NIXL_ETCD_ENDPOINTS": self.endpoints, "NIXL_ETCD_NAMESPACE": f"{ETCD_PREFIX}/{self.run_id}"}

    def listen_port(self, role: str, rank: int) -> int | None:
        """The NIXL listen thread's port of a rank (None: no listener); D's initiator takes any port."""
        if self.mode != "direct":
            return None
        return self.port + rank if role == "P" else 0

    def p_address(self, p_rank: int) -> tuple[str, int]:
        return self.host, self.port + p_rank

    def where(self, p_rank: int) -> str:
        """Where P rank ``p_rank``'s metadata comes from, for messages."""
        if self.mode == "direct":
            host, port = self.p_address(p_rank)
            return f"NIXL listener {_join(host, port)}"
        return f"etcd {self.endpoints} (run {self.run_id})"

    def publish(self, agent: Any) -> None:
        """Make this rank's agent metadata available (direct: the listener answers by itself)."""
        if self.mode == "etcd":
            agent.send_local_metadata()

    def request(self, agent: Any, name: str, p_rank: int | None) -> None:
        """Ask for an agent's metadata (again: it may not be there yet); direct: send ours there too."""
        if self.mode == "etcd":
            agent.fetch_remote_metadata(name)
        elif p_rank is not None:
            host, port = self.p_address(p_rank)
            agent.fetch_remote_metadata(name, host, port)
            agent.send_local_metadata(host, port)

    def withdraw(self, agent: Any) -> None:
        """Remove this rank's metadata from the store at the end (a later run may reuse the id)."""
        if self.mode == "etcd":
            agent.invalidate_local_metadata()


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def parse_address(flag: str, text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT`` for IPv6) with a port of 1..65535."""
    match = re.fullmatch(r"\[([^\]]+)\]:(\d+)|([^:\[\]]+):(\d+)", text.strip())
    if not match:
        raise UserError(f"{flag} {text}: expected HOST:PORT, e.g. 10.0.0.5:5600")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    if not 1 <= port <= 65535:
        raise UserError(f"{flag} {text}: port {port} is not in 1..65535")
    return host, port


def resolve(role: str | None, listen: str | None, peer: str | None, etcd: str | None,
            run_id: str | None) -> Discovery | None:
    """The discovery the flags ask for; None for a one-host run (both sides here)."""
    given = [flag for flag, value in (("--listen", listen), ("--peer", peer), ("--etcd", etcd),
                                      ("--run-id", run_id)) if value is not None]
    if role is None:
        if given:
            raise UserError(f"{given[0]} is for a two-host run: add --role prefill or --role decode")
        return None
    own, other = ("--listen", "--peer") if role == "prefill" else ("--peer", "--listen")
    if (listen if other == "--listen" else peer) is not None:
        raise UserError(f"{other} is for the {'decode' if role == 'prefill' else 'prefill'} side; "
                        f"--role {role} takes {own} HOST:PORT or --etcd ENDPOINTS")
    direct = listen if role == "prefill" else peer
    if direct is not None and etcd is not None:
        raise UserError(f"{own} and --etcd: choose one way for the sides to find each other")
    if direct is None and etcd is None:
        raise UserError(f"--role {role} needs {own} HOST:PORT or --etcd ENDPOINTS (with --run-id)")
    if direct is not None:
        if run_id is not None:
            raise UserError(f"--run-id names a run in etcd; with {own} the address is the run's identity")
        host, port = parse_address(own, direct)
        return Discovery(role, "direct", host=host, port=port)
    assert etcd is not None
    if run_id is None:
        raise UserError("--etcd needs --run-id NAME, the same on both sides (two runs with different ids "
                        "never see each other's agents)")
    if not RUN_ID.fullmatch(run_id):
        raise UserError(f"--run-id {run_id!r}: use 1-64 letters, digits, '.', '_' or '-'")
    endpoints = ",".join(e.strip() for e in etcd.split(",") if e.strip())
    if not endpoints:
        raise UserError("--etcd: give the etcd client URLs, e.g. http://10.0.0.2:2379")
    return Discovery(role, "etcd", endpoints=endpoints, run_id=run_id)


def check_listen(discovery: Discovery, p_tp: int) -> None:
    """The P listeners' ports exist and are free, and HOST is an address of this machine."""
    last = discovery.port + p_tp - 1
    where = _join(discovery.host, discovery.port)
    if last > 65535:
        raise UserError(f"--listen {where}: P ranks 0..{p_tp - 1} need ports {discovery.port}..{last}")
    for rank in range(p_tp):
        port = discovery.port + rank
        for host in (discovery.host, "::" if ":" in discovery.host else "0.0.0.0"):   # NIXL binds every address
            with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as NIXL's listener: TIME_WAIT is no use
                try:
                    sock.bind((host, port))
                except OSError as exc:
                    if exc.errno == errno.EADDRINUSE:
                        raise UserError(f"--listen {where}: port {port} (P{rank}'s NIXL listener) is already in "
                                        f"use; pick another PORT") from None
                    raise UserError(f"--listen {where}: cannot listen on {_join(host, port)}: "
                                    f"{exc.strerror} (HOST must be an address of this machine)") from None


def check_etcd(discovery: Discovery) -> None:
    """At least one endpoint answers etcd's /health (NIXL itself says nothing when none does)."""
    import urllib.error
    import urllib.request

    problems = []
    for endpoint in discovery.endpoints.split(","):
        url = endpoint if "://" in endpoint else f"http://{endpoint}"
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=ETCD_PROBE_S) as reply:
                if reply.status == 200:
                    return
                problems.append(f"{endpoint}: HTTP {reply.status}")
        except urllib.error.HTTPError as exc:
            problems.append(f"{endpoint}: HTTP {exc.code}")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            problems.append(f"{endpoint}: {getattr(reason, 'strerror', None) or reason}")
    raise UserError(f"--etcd: no etcd server answers ({'; '.join(problems)})")
