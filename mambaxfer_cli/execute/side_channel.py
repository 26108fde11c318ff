"""The loopback side channel: a D rank asks a P rank for its NIXL agent metadata and layout.

As in vLLM's connector, each P rank listens on its own port; a D rank connects, sends one request
frame and receives one reply frame. A frame is a JSON header plus an opaque blob (the agent
metadata). Every wait is bounded by the caller's deadline.
"""

from __future__ import annotations

import errno
import json
import select
import socket
import struct
import time
from typing import Callable

_LENGTHS = struct.Struct("!II")
MAX_HEADER = 1 << 20
MAX_BLOB = 64 << 20
REQUEST_WAIT = 2.0   # how long a P rank waits for the request of a client that connected


class SideChannelError(Exception):
    """The exchange failed: the message says which peer and how."""


class PortInUse(SideChannelError):
    pass


def _remaining(deadline: float) -> float:
    return deadline - time.time()


def _recv_exact(sock: socket.socket, size: int, deadline: float, what: str) -> bytes:
    chunks, got = [], 0
    while got < size:
        left = _remaining(deadline)
        if left <= 0:
            raise socket.timeout(what)
        sock.settimeout(left)
        chunk = sock.recv(min(size - got, 1 << 20))
        if not chunk:
            raise SideChannelError(f"{what}: the connection closed after {got} of {size} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def send_frame(sock: socket.socket, header: dict, blob: bytes, deadline: float) -> None:
    head = json.dumps(header).encode()
    sock.settimeout(max(_remaining(deadline), 0.001))
    sock.sendall(_LENGTHS.pack(len(head), len(blob)) + head + blob)


def recv_frame(sock: socket.socket, deadline: float, what: str) -> tuple[dict, bytes]:
    head_len, blob_len = _LENGTHS.unpack(_recv_exact(sock, _LENGTHS.size, deadline, what))
    if head_len > MAX_HEADER or blob_len > MAX_BLOB:
        raise SideChannelError(f"{what}: not a mambaxfer side-channel frame")
    try:
        header = json.loads(_recv_exact(sock, head_len, deadline, what))
    except ValueError:
        raise SideChannelError(f"{what}: not a mambaxfer side-channel frame") from None
    return header, _recv_exact(sock, blob_len, deadline, what)


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

    def serve(self, reply: Callable[[dict], tuple[dict, bytes]], wait: float, deadline: float) -> dict | None:
        """Wait up to ``wait`` seconds for a client; answer its request. Returns the request."""
        ready, _, _ = select.select([self._sock], [], [], wait)
        if not ready:
            return None
        client, _ = self._sock.accept()
        with client:
            limit = min(deadline, time.time() + REQUEST_WAIT)
            try:
                request, _ = recv_frame(client, limit, "side-channel request")
                header, blob = reply(request)
                send_frame(client, header, blob, deadline)
            except (OSError, SideChannelError):
                return None   # a client that went away or spoke garbage; the D side reports it
        return request

    def close(self) -> None:
        self._sock.close()


def fetch(host: str, port: int, request: dict, deadline: float, peer: str) -> tuple[dict, bytes]:
    """Ask ``peer`` (listening on host:port) for its metadata."""
    where = f"{peer}'s side channel at {host}:{port}"
    left = _remaining(deadline)
    if left <= 0:
        raise SideChannelError(f"no time left to contact {where}")
    try:
        with socket.create_connection((host, port), timeout=left) as sock:
            send_frame(sock, request, b"", deadline)
            return recv_frame(sock, deadline, where)
    except socket.timeout:
        raise SideChannelError(f"{peer} did not answer on its side channel {host}:{port} within the "
                               f"timeout") from None
    except ConnectionRefusedError:
        raise SideChannelError(f"{where} refused the connection") from None
    except OSError as exc:
        raise SideChannelError(f"{where}: {exc.strerror or exc}") from None
