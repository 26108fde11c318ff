"""vLLM's side of a two-host run (``execute/remote.py``'s notifications): P answers each D rank's
``hello`` with ``welcome`` (its registered regions and geometry) or ``refuse``, then waits for each
consumer's last READ notification; D says hello to each source P rank and waits for its answer.
Both ping the other while the READs run."""

from __future__ import annotations

import time
from typing import Any

from mambaxfer_cli.engines.vllm.transfer.exchange import check_layout, layout
from mambaxfer_cli.engines.vllm.transfer.results import PrefillResult, Served
from mambaxfer_cli.engines.vllm.transfer.tasks import DecodeTask, PrefillTask
from mambaxfer_cli.execute import agreement
from mambaxfer_cli.execute.agent import RankAgent
from mambaxfer_cli.execute.channel import WAIT_ROUND, Channel, Idle, RankFailure
from mambaxfer_cli.execute.remote import REQUEST_EVERY, Inbox, Peers, greet, notify, refuse


# --- prefill ---------------------------------------------------------------------------------------

def serve(task: PrefillTask, ch: Channel, node: RankAgent, fill_s: float) -> PrefillResult:
    """Answer hellos and wait for every consumer's last READ; returns what this rank served."""
    discovery, agent = task.settings.discovery, node.agent
    assert discovery is not None and task.settings.geometry is not None
    mine, header = task.settings.geometry, layout(task, node.memory)
    node.publish()
    ch.publish("listening", discovery.listen_port("P", task.rank))
    ch.phase("serving", discovery.where(task.rank))
    inbox = Inbox(agent)
    consumers = Peers(agent, "D", inbox, " before its last READ completed")
    finals: dict[int, bytes] = {}       # each consumer's last READ's notification
    hellos: dict[str, tuple[dict[str, Any], float]] = {}    # sender -> (hello, when its metadata was asked)

    def done(d_rank: int) -> bool:
        return (consumers.names[d_rank], finals[d_rank]) in inbox.plain

    while len(finals) < len(task.consumers) or not all(done(d) for d in finals):
        ch.check_stop()
        missing = sorted(set(task.consumers) - set(finals))
        busy = [f"D{d}" for d in finals if not done(d)]
        ch.waiting(("the hello of " + ", ".join(f"D{d}" for d in missing)) if missing
                   else "the READ notifications of " + ", ".join(busy))
        inbox.poll()
        for sender, control in inbox.take("hello"):
            if sender not in consumers.names.values():
                hellos[sender] = (control, 0.0)
        for sender, (hello, asked) in list(hellos.items()):
            if agent.check_remote_metadata(sender):
                del hellos[sender]
                if hello.get("d_rank") in finals:   # a second decode run
                    notify(agent, sender, agreement.encode(
                        "refuse", p_rank=task.rank, message=f"P{task.rank} already serves another "
                                                            f"D{hello.get('d_rank')}"))
                    continue
                d_rank, final = _answer(task, ch, agent, sender, hello, mine, header)
                consumers.names[d_rank], finals[d_rank] = sender, final
            elif time.monotonic() - asked >= REQUEST_EVERY:
                discovery.request(agent, sender, None)   # etcd; a direct D sent it to our listener
                hellos[sender] = (hello, time.monotonic())
        consumers.ping(done)
        time.sleep(WAIT_ROUND)
    ch.phase("freeing", "every consumer notified")
    return PrefillResult(task.rank, fill_s, task.consumers,
                         served=tuple(Served(d, name, sum(n for (who, _), n in inbox.plain.items() if who == name))
                                      for d, name in sorted(consumers.names.items())))


def _answer(task: PrefillTask, ch: Channel, agent: Any, sender: str, hello: dict[str, Any], mine: dict[str, Any],
            header: dict[str, Any]) -> tuple[int, bytes]:
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
    return d_rank, f"{task.settings.run_id}-iter{int(hello.get('iters', 1)) - 1}".encode()


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
