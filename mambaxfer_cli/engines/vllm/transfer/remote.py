"""vLLM's side of a two-host run (``execute/remote.py``'s notifications): P answers each D rank's
``hello`` with ``welcome`` (its registered regions and geometry) or ``refuse``, then waits for each
consumer's last READ notification; D says hello to each source P rank and waits for its answer.
Both ping the other while the READs run."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from mambaxfer_cli.engines.vllm.transfer.exchange import check_layout, layout
from mambaxfer_cli.engines.vllm.transfer.results import PrefillResult, Served
from mambaxfer_cli.engines.vllm.transfer.tasks import DecodeTask, PrefillTask
from mambaxfer_cli.execute import agreement
from mambaxfer_cli.execute.agent import RankAgent
from mambaxfer_cli.execute.channel import WAIT_ROUND, Channel, Idle, PeerGone, RankFailure
from mambaxfer_cli.execute.remote import PING_EVERY, REQUEST_EVERY, Inbox, Peers, greet, notifications, notify, refuse


# --- prefill ---------------------------------------------------------------------------------------

@dataclass
class _Consumer:
    d_rank: int
    agent: str
    final: bytes                # the notification of its last READ
    notifications: int = 0
    done: bool = False


def serve(task: PrefillTask, ch: Channel, node: RankAgent, fill_s: float) -> PrefillResult:
    """Answer hellos and wait for every consumer's last READ; returns what this rank served."""
    discovery, agent = task.settings.discovery, node.agent
    assert discovery is not None and task.settings.geometry is not None
    mine, header = task.settings.geometry, layout(task, node.memory)
    node.publish()
    ch.publish("listening", discovery.listen_port("P", task.rank))
    ch.phase("serving", discovery.where(task.rank))
    consumers: dict[str, _Consumer] = {}
    hellos: dict[str, tuple[dict[str, Any], float]] = {}    # sender -> (hello, when its metadata was asked)
    last_ping = time.monotonic()
    while len(consumers) < len(task.consumers) or not all(c.done for c in consumers.values()):
        ch.check_stop()
        missing = sorted(set(task.consumers) - {c.d_rank for c in consumers.values()})
        busy = [f"D{c.d_rank}" for c in consumers.values() if not c.done]
        ch.waiting(("the hello of " + ", ".join(f"D{d}" for d in missing)) if missing
                   else "the READ notifications of " + ", ".join(busy))
        for sender, message, control in notifications(agent):
            if control is None:
                consumer = consumers.get(sender)
                if consumer is not None:
                    consumer.notifications += 1
                    consumer.done |= message == consumer.final
            elif control["kind"] == "hello" and sender not in consumers:
                hellos[sender] = (control, 0.0)
        for sender, (hello, asked) in list(hellos.items()):
            if agent.check_remote_metadata(sender):
                del hellos[sender]
                if any(c.d_rank == hello.get("d_rank") for c in consumers.values()):   # a second decode run
                    notify(agent, sender, agreement.encode(
                        "refuse", p_rank=task.rank, message=f"P{task.rank} already serves another "
                                                            f"D{hello.get('d_rank')}"))
                    continue
                consumers[sender] = _answer(task, ch, agent, sender, hello, mine, header)
            elif time.monotonic() - asked >= REQUEST_EVERY:
                discovery.request(agent, sender, None)   # etcd; a direct D sent it to our listener
                hellos[sender] = (hello, time.monotonic())
        if time.monotonic() - last_ping >= PING_EVERY:
            last_ping = time.monotonic()
            _ping_consumers(agent, consumers)
        time.sleep(WAIT_ROUND)
    ch.phase("freeing", "every consumer notified")
    return PrefillResult(task.rank, fill_s, task.consumers,
                         served=tuple(Served(c.d_rank, c.agent, c.notifications)
                                      for c in sorted(consumers.values(), key=lambda c: c.d_rank)))


def _answer(task: PrefillTask, ch: Channel, agent: Any, sender: str, hello: dict[str, Any], mine: dict[str, Any],
            header: dict[str, Any]) -> _Consumer:
    d_rank = hello.get("d_rank")
    problem = agreement.mismatch(mine, hello.get("geometry") or {})
    if problem is None and d_rank not in task.consumers:
        problem = f"D{d_rank} does not read from P{task.rank} in this plan"
    if problem is not None:
        refuse(agent, sender, task.rank, problem, True)
        raise RankFailure(f"refused D{d_rank} ({sender}): {problem}", user=True)
    assert isinstance(d_rank, int)      # one of this rank's consumers
    notify(agent, sender, agreement.encode("welcome", p_rank=task.rank, header=header, geometry=mine))
    ch.phase("serving", f"welcomed D{d_rank}")
    final = f"{task.settings.run_id}-iter{int(hello.get('iters', 1)) - 1}".encode()
    return _Consumer(d_rank, sender, final)


def _ping_consumers(agent: Any, consumers: dict[str, _Consumer]) -> None:
    for consumer in consumers.values():
        if consumer.done:
            continue
        try:
            notify(agent, consumer.agent, agreement.encode("ping"))
        except PeerGone as gone:
            # Its last READ's notification may have come in just before it left.
            for sender, message, _ in notifications(agent):
                if sender == consumer.agent and message == consumer.final:
                    consumer.done = True
            if not consumer.done:
                raise PeerGone(f"D{consumer.d_rank} ({consumer.agent}) went away before its last READ "
                               f"completed", gone.nixl) from None


# --- decode ----------------------------------------------------------------------------------------

def connect(task: DecodeTask, ch: Channel, node: RankAgent) -> tuple[dict[int, tuple[str, dict[str, Any]]], Idle]:
    """Each source P rank's agent name and published layout, once every one has welcomed us; and
    what pings them while this rank waits."""
    agent = node.agent
    node.publish()
    inbox = Inbox(agent)
    peers = Peers(agent, "P", inbox)
    headers: dict[int, dict[str, Any]] = {}
    regions: dict[int, Any] = {}

    def welcome(p_rank: int, control: dict[str, Any]) -> None:
        header = headers[p_rank] = control.get("header") or {}
        check_layout(task, p_rank, header)
        regions[p_rank] = agent.get_xfer_descs([(int(a), int(n), int(header["dev_id"])) for a, n in header["regions"]],
                                               header["mem_type"])

    hello = agreement.encode("hello", d_rank=task.rank, iters=task.settings.iters, geometry=task.settings.geometry)
    greet(task, ch, agent, node.remotes, inbox, peers, task.sources, hello, welcome,
          lambda p: agent.check_remote_metadata(peers.names[p], regions[p]))
    return {p: (peers.names[p], headers[p]) for p in task.sources}, peers.ping
