"""A rank's side of a two-host run: control messages and liveness over NIXL notifications. Both
sides ping each other every PING_EVERY seconds, so that one that died ends the other at once."""

from __future__ import annotations

import time
from typing import Any, Iterator

from mambaxfer_cli.execute import agreement
from mambaxfer_cli.execute.channel import WAIT_ROUND, PeerGone
from mambaxfer_cli.execute.tasks import RankTask

REQUEST_EVERY = 0.5   # metadata requests are asynchronous and find nothing until the peer is up
PING_EVERY = 0.5
QUIET = {"NIXL_LOG_LEVEL": "FATAL", "UCX_LOG_LEVEL": "fatal"}   # no line per metadata request too early
LINGER = 0.5          # after a refusal, so that it reaches the other side before this agent goes


def peer_gone(exc: Exception) -> bool:
    """Whether NIXL's error says the peer went away (a disconnect, or its metadata gone)."""
    return type(exc).__name__ in ("nixlRemoteDisconnectError", "nixlNotFoundError")


def nixl_said(exc: Exception) -> str:
    """NIXL's error in one line: its type and its first line."""
    first = next(iter(str(exc).strip().splitlines()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def notify(agent: Any, name: str, message: bytes) -> None:
    try:
        agent.send_notif(name, message)
    except Exception as exc:
        if peer_gone(exc):
            raise PeerGone(f"{name} went away", nixl_said(exc)) from None
        raise


def notifications(agent: Any) -> Iterator[tuple[str, bytes, dict[str, Any] | None]]:
    for sender, messages in agent.get_new_notifs().items():
        sender = sender.decode() if isinstance(sender, bytes) else sender
        for message in messages:
            yield sender, message, agreement.decode(message)


def linger(agent: Any) -> None:
    end = time.monotonic() + LINGER
    while time.monotonic() < end:
        agent.get_new_notifs()
        time.sleep(WAIT_ROUND)


def p_agent(task: RankTask, p_rank: int) -> str:
    return f"mambaxfer-{task.settings.run_id}-P{p_rank}"
