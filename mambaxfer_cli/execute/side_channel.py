"""The loopback side channel: as in vLLM's connector, a D rank asks a P rank (on its own port)
for its NIXL agent metadata and layout, one frame each way (a JSON header and a blob). A silent
peer is waited for until the coordinator says stop.
"""

from __future__ import annotations

import contextlib
import errno
import json
import select
import socket
import struct
from typing import Any, Callable, Sequence

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.execute.agent import RankAgent
from mambaxfer_cli.execute.channel import Channel, RankFailure
from mambaxfer_cli.execute.faults import fault
from mambaxfer_cli.execute.tasks import RankTask, RunSettings

_LENGTHS = struct.Struct("!II")
MAX_HEADER = 1 << 20
MAX_BLOB = 64 << 20
STOP_LOOK = 0.25   # between two looks at whether the rank was asked to stop, while a peer is silent

KeepGoing = Callable[[], None]   # raises when the rank must stop waiting (the coordinator's stop)


class SideChannelError(Exception):
    """The exchange failed: the message says which peer and how."""


class PortInUse(SideChannelError):
    pass


def _recv_exact(sock: socket.socket, size: int, keep_going: KeepGoing, what: str) -> bytes:
    chunks, got = [], 0
    sock.settimeout(STOP_LOOK)
    while got < size:
        try:
            chunk = sock.recv(min(size - got, 1 << 20))
        except socket.timeout:
            keep_going()
            continue
        if not chunk:
            raise SideChannelError(f"{what}: the connection closed after {got} of {size} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def send_frame(sock: socket.socket, header: dict[str, Any], blob: bytes) -> None:
    head = json.dumps(header).encode()
    sock.settimeout(None)      # the peer reads it at once; one that died closes the connection
    sock.sendall(_LENGTHS.pack(len(head), len(blob)) + head + blob)


def recv_frame(sock: socket.socket, keep_going: KeepGoing, what: str) -> tuple[dict[str, Any], bytes]:
    head_len, blob_len = _LENGTHS.unpack(_recv_exact(sock, _LENGTHS.size, keep_going, what))
    header = None
    if head_len <= MAX_HEADER and blob_len <= MAX_BLOB:
        with contextlib.suppress(ValueError, RecursionError):     # not JSON, or nested past the parser's depth
            header = json.loads(_recv_exact(sock, head_len, keep_going, what))
    if not isinstance(header, dict):
        raise SideChannelError(f"{what}: not a mambaxfer side-channel frame")
    return header, _recv_exact(sock, blob_len, keep_going, what)


class SideChannelServer:
    """A P rank's listening socket; ``serve`` answers at most one request per call."""

    def __init__(self, host: str, port: int) -> None:
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._sock.bind((host, port))
            self._sock.listen(64)
        except OSError as exc:
            self._sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(f"side-channel port {host}:{port} is already in use; "
                                f"pick another --port, or --port 0 for free ports") from None
            raise SideChannelError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        self.host = host
        self.port = self._sock.getsockname()[1]

    def serve(self, reply: Callable[[dict[str, Any]], tuple[dict[str, Any], bytes]], wait: float,
              keep_going: KeepGoing) -> dict[str, Any] | None:
        """Wait up to ``wait`` seconds for a client; answer its request. Returns the request."""
        ready, _, _ = select.select([self._sock], [], [], wait)
        if not ready:
            return None
        client, _ = self._sock.accept()
        with client:
            try:
                request, _ = recv_frame(client, keep_going, "side-channel request")
                header, blob = reply(request)
                send_frame(client, header, blob)
            except (OSError, SideChannelError):
                return None   # a client that went away or spoke garbage; the D side reports it
        return request

    def close(self) -> None:
        self._sock.close()


def fetch(host: str, port: int, request: dict[str, Any], peer: str,
          keep_going: KeepGoing) -> tuple[dict[str, Any], bytes]:
    """Ask ``peer`` (listening on host:port) for its metadata, as long as it takes to answer."""
    where = f"{peer}'s side channel at {host}:{port}"
    try:
        with socket.create_connection((host, port)) as sock:
            send_frame(sock, request, b"")
            return recv_frame(sock, keep_going, where)
    except ConnectionRefusedError:
        raise SideChannelError(f"{where} refused the connection") from None
    except OSError as exc:
        raise SideChannelError(f"{where}: {exc.strerror or exc}") from None


def listen(host: str, port: int, serve: Callable[[SideChannelServer], None]) -> None:
    """A rank's side channel on ``host:port`` while ``serve`` answers on it."""
    try:
        server = SideChannelServer(host, port)
    except PortInUse as exc:
        raise RankFailure(str(exc), user=True) from None
    except SideChannelError as exc:
        raise RankFailure(str(exc)) from None
    try:
        serve(server)
    finally:
        server.close()


def replies(task: RankTask, ch: Channel, server: SideChannelServer, header: dict[str, Any], metadata: bytes,
            peer: str) -> Callable[[dict[str, Any]], tuple[dict[str, Any], bytes]]:
    """Say where this rank listens; what it answers each rank of role ``peer`` (P, D) that asks."""

    def reply(request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        ch.phase("serving", f"answering {peer}{request.get('p_rank' if peer == 'P' else 'd_rank')}")
        fault(task, "serve")
        return header, metadata

    ch.publish("listening", server.port)
    ch.phase("serving", f"{server.host}:{server.port}")
    return reply


def fetch_peers(task: RankTask, ch: Channel, node: RankAgent, peer: str, ranks: Sequence[int],
                check: Callable[[int, dict[str, Any]], None]) -> list[tuple[str, dict[str, Any]]]:
    """One host: each rank of role ``peer`` (P, D) in ``ranks``, asked on its side channel once the
    coordinator says where they listen: its agent loaded, and what it published, ``check``-ed."""
    ch.phase("exchanging")
    ports = ch.gather("listening", peer, f"the {peer} ranks to listen")
    host, out = task.settings.host, []
    for rank in ranks:
        port = ports[rank]
        ch.waiting(f"{peer}{rank}'s side channel {host}:{port} to answer")
        try:
            header, blob = fetch(host, port, {f"{task.role.lower()}_rank": task.rank}, f"{peer}{rank}", ch.check_stop)
        except SideChannelError as exc:
            raise RankFailure(str(exc)) from None
        ch.phase("exchanging", f"loading {peer}{rank}'s metadata")
        check(rank, header)
        out.append((node.add_remote(blob), header))
    return out


def check_ports(settings: RunSettings, p_tp: int, role: str = "P") -> None:
    """With a fixed --port, rank r of ``role`` listens on port + r: fail before spawning if one is taken."""
    if not settings.port:
        return
    if settings.port + p_tp - 1 > 65535:
        raise UserError(f"--port {settings.port}: {role} ranks need ports {settings.port}..{settings.port + p_tp - 1}")
    for rank in range(p_tp):
        port = settings.port + rank
        with socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((settings.host, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise UserError(f"--port {settings.port}: {settings.host}:{port} ({role}{rank}'s side channel) "
                                    f"is already in use; pick another --port, or --port 0 for free ports") from None
                raise UserError(f"--host {settings.host} --port {port}: cannot listen there: {exc.strerror}") from None
