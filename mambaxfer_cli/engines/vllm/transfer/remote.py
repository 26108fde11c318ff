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
from mambaxfer_cli.execute.channel import WAIT_ROUND, Channel, PeerGone, RankFailure
from mambaxfer_cli.execute.remote import PING_EVERY, REQUEST_EVERY, linger, notifications, notify, p_agent


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
        try:
            notify(agent, sender, agreement.encode("refuse", p_rank=task.rank, message=problem))
            linger(agent)
        except PeerGone:
            pass
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

def connect(task: DecodeTask, ch: Channel, node: RankAgent) -> dict[int, tuple[str, dict[str, Any]]]:
    """Each source P rank's agent name and published layout, once every one has welcomed us."""
    discovery, agent = task.settings.discovery, node.agent
    assert discovery is not None and task.settings.geometry is not None
    mine = task.settings.geometry
    ch.phase("exchanging", "finding the P ranks")
    node.publish()
    hello = agreement.encode("hello", d_rank=task.rank, iters=task.settings.iters, geometry=mine)
    names = {p: p_agent(task, p) for p in task.sources}
    asked = {p: 0.0 for p in task.sources}
    greeted: set[int] = set()
    answered: dict[int, tuple[str, dict[str, Any], Any]] = {}   # welcomed, P's registered memory not loaded yet
    welcomed: dict[int, tuple[str, dict[str, Any]]] = {}
    last_ping = time.monotonic()
    while len(welcomed) < len(names):
        ch.check_stop()
        waiting = next(p for p in task.sources if p not in welcomed)
        ch.waiting(f"P{waiting}'s registered memory in its metadata" if waiting in answered
                   else f"P{waiting}'s answer" if waiting in greeted
                   else f"P{waiting}'s agent metadata from {discovery.where(waiting)}")
        for p, name in names.items():
            if p in greeted:
                continue
            if agent.check_remote_metadata(name):
                ch.phase("exchanging", f"hello to P{p}")
                try:
                    notify(agent, name, hello)
                    greeted.add(p)
                except PeerGone:   # metadata of an agent gone since (a stale etcd entry): ask again
                    agent.remove_remote_agent(name)
            elif time.monotonic() - asked[p] >= REQUEST_EVERY:
                discovery.request(agent, name, p)
                asked[p] = time.monotonic()
        by_name = {name: p for p, name in names.items()}
        for sender, _, control in notifications(agent):
            source = by_name.get(sender)
            if control is None or source is None:
                continue
            if control["kind"] == "refuse":
                raise RankFailure(f"P{source} refused this decode run: {control.get('message')}", user=True)
            if control["kind"] == "welcome" and source not in welcomed and source not in answered:
                problem = agreement.mismatch(control.get("geometry") or {}, mine)
                if problem is not None:
                    raise RankFailure(f"P{source}: {problem}", user=True)
                header = control.get("header") or {}
                check_layout(task, source, header)
                regions = [(int(a), int(n), int(header["dev_id"])) for a, n in header["regions"]]
                answered[source] = (sender, header, agent.get_xfer_descs(regions, header["mem_type"]))
        for p, (name, header, regions) in list(answered.items()):
            # The metadata loaded before P registered its memory may not hold it: ask until it does.
            if agent.check_remote_metadata(name, regions):
                welcomed[p] = (name, header)
                node.remotes.append(name)
                del answered[p]
            elif time.monotonic() - asked[p] >= REQUEST_EVERY:
                discovery.request(agent, name, p)
                asked[p] = time.monotonic()
        if time.monotonic() - last_ping >= PING_EVERY:
            last_ping = time.monotonic()
            ping_sources(agent, {p: names[p] for p in greeted})
        time.sleep(WAIT_ROUND)
    return welcomed


def ping_sources(agent: Any, names: dict[int, str]) -> None:
    """Ping P ranks this D rank has greeted (their metadata loaded). A peer whose process died is
    reported by NIXL at once as a disconnect, or, once its listener has dropped the peer's metadata
    on the disconnect, as not found: either way the peer went away."""
    for p, name in names.items():
        try:
            notify(agent, name, agreement.encode("ping"))
        except PeerGone as gone:
            raise PeerGone(f"P{p} ({name}) went away", gone.nixl) from None
