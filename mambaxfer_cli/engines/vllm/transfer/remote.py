"""vLLM's side of a two-host run: P answers each D rank's ``hello`` (``welcome`` or ``refuse``) and
waits for its last READ's notification; D greets each source P rank (``execute/remote.py``)."""

from __future__ import annotations

from typing import Any

from mambaxfer_cli.engines.vllm.transfer.exchange import check_layout, layout
from mambaxfer_cli.engines.vllm.transfer.results import PrefillResult, Served
from mambaxfer_cli.engines.vllm.transfer.tasks import DecodeTask, PrefillTask
from mambaxfer_cli.execute import agreement
from mambaxfer_cli.execute.agent import RankAgent
from mambaxfer_cli.execute.channel import Channel, Idle
from mambaxfer_cli.execute.remote import Inbox, Peers, admit, greet


# --- prefill ---------------------------------------------------------------------------------------

def serve(task: PrefillTask, ch: Channel, node: RankAgent, fill_s: float) -> PrefillResult:
    """Answer hellos and wait for every consumer's last READ; returns what this rank served."""
    discovery = task.settings.discovery
    assert discovery is not None
    node.publish()
    ch.publish("listening", discovery.listen_port("P", task.rank))
    ch.phase("serving", discovery.where(task.rank))
    inbox = Inbox(node.agent)
    consumers = Peers(node.agent, "D", inbox, " before its last READ completed")
    hellos: dict[int, dict[str, Any]] = {}

    def done(d_rank: int) -> bool:
        """Its last READ's notification came."""
        final = f"{task.settings.run_id}-iter{int(hellos[d_rank].get('iters', 1)) - 1}".encode()
        return (consumers.names[d_rank], final) in inbox.plain

    def busy() -> str | None:
        reading = [f"D{d}" for d in hellos if not done(d)]
        return "the READ notifications of " + ", ".join(reading) if reading else None

    def refusal(hello: dict[str, Any]) -> str | None:
        d_rank = hello.get("d_rank")
        return None if d_rank in task.consumers else f"D{d_rank} does not read from P{task.rank} in this plan"

    admit(task, ch, node.agent, node.remotes, inbox, consumers, task.consumers, refusal, "serves", hellos,
          {"header": layout(task, node.memory)}, busy=busy, last_word=done)
    ch.phase("freeing", "every consumer notified")
    return PrefillResult(task.rank, fill_s, task.consumers,
                         served=tuple(Served(d, name, sum(n for (who, _), n in inbox.plain.items() if who == name))
                                      for d, name in sorted(consumers.names.items())))


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
