"""An execute run's rank programs, each in its own process with its own NIXL agent (the steps of
docs/execute.md); NIXL handles and registrations are released on every path."""

from __future__ import annotations

import time
from typing import Any

from mambaxfer_cli.engines.vllm.transfer import remote
from mambaxfer_cli.execute.remote import PING_EVERY
from mambaxfer_cli.engines.vllm.transfer.exchange import exchange, fill, layout
from mambaxfer_cli.execute.agent import DescriptorPairing, RankAgent
from mambaxfer_cli.execute.channel import WAIT_ROUND, Channel
from mambaxfer_cli.execute.faults import fault
from mambaxfer_cli.engines.vllm.transfer.whole_pages import REGION as PLE, with_side
from mambaxfer_cli.engines.vllm.transfer.results import DecodeResult, PrefillResult
from mambaxfer_cli.execute.side_channel import SideChannelServer, listen, replies
from mambaxfer_cli.engines.vllm.transfer.tasks import DecodeTask, PrefillTask
from mambaxfer_cli.engines.vllm.transfer.verify import verify_decode
from mambaxfer_cli.engines.vllm.descriptors import DescriptorRead
from mambaxfer_cli.engines.vllm.proof.addresses import nixl_rows, read_bytes


def prefill(task: PrefillTask, ch: Channel) -> PrefillResult:
    with RankAgent(task, ch, telemetry=False) as node:
        ch.phase("filling")
        started = time.perf_counter()
        fill(task, node.memory, ch.progress)
        fill_s = time.perf_counter() - started
        fault(task, "fill")
        node.register(ch)
        if task.settings.discovery is not None:
            fault(task, "serve")
            return remote.serve(task, ch, node, fill_s)
        listen(task.settings.host, task.port, lambda server: _serve(task, ch, node, server))
        return PrefillResult(task.rank, fill_s, task.consumers)


def _serve(task: PrefillTask, ch: Channel, node: RankAgent, server: SideChannelServer) -> None:
    """Answer metadata requests until every consumer's last READ notified."""
    reply = replies(task, ch, server, layout(task, node.memory), node.agent.get_agent_metadata(), "D")
    final = f"{task.settings.run_id}-iter{task.settings.iters - 1}".encode()
    waiting = set(task.consumers)
    while waiting:
        ch.check_stop()
        ch.waiting("the READ notifications of " + ", ".join(f"D{d}" for d in sorted(waiting)))
        server.serve(reply, WAIT_ROUND, ch.check_stop)
        waiting -= node.notified("D", final)
    ch.phase("freeing", "every consumer notified")


def decode(task: DecodeTask, ch: Channel) -> DecodeResult:
    with RankAgent(task, ch, telemetry=True) as node:
        memory = node.memory
        node.poison_and_register(ch)
        discovery = task.settings.discovery
        published, idle = remote.connect(task, ch, node) if discovery is not None else (exchange(task, ch, node), None)
        fault(task, "prepare")
        ch.phase("preparing")
        pairings = [pairing(task, read, memory.bases, memory.mem_type, *published[read.p_rank])
                    for read in task.reads]
        xfers, prep = node.prepare("READ", pairings, ch)
        ch.meet("prepared", "D", "every D rank to prepare", milestone=True, idle=idle, every=PING_EVERY)
        fault(task, "transfer")
        times = []
        for iteration in range(task.settings.iters):
            ch.phase("transferring", f"iteration {iteration + 1}/{task.settings.iters}")
            if iteration:
                memory.poison()
            memory.sync()
            times.append(node.transfer(xfers, f"{task.settings.run_id}-iter{iteration}".encode(), ch))
        telemetry = node.telemetry(xfers)
        ch.phase("verifying")
        started = time.perf_counter()
        check = verify_decode(task, [memory.fetch(i) for i in range(memory.count)], ch.progress)
        ple = [s for s in task.sides if s.lists.space == PLE]
        indexer = [s for s in task.sides if s.lists.space != PLE]
        return DecodeResult(
            task.rank, task.sources, tuple(sorted({r.local_list for r in task.reads})),
            bytes=sum(read_bytes(r.local, r.local_ids) for r in task.reads) + sum(s.bytes for s in task.sides),
            descriptors_posted=prep.descriptors_posted,
            descriptors_merged=sum(int(t.descCount) for t in telemetry),
            telemetry_bytes=sum(int(t.totalBytes) for t in telemetry),
            times_s=tuple(times), xfer_us=max((int(t.xferDuration) for t in telemetry), default=0),
            prepare_s=prep.prep_s + prep.make_s, verify_s=time.perf_counter() - started, check=check,
            ple_bytes=sum(s.bytes for s in ple), ple_descriptors=sum(s.descriptors for s in ple),
            indexer_bytes=sum(s.bytes for s in indexer), indexer_descriptors=sum(s.descriptors for s in indexer))


def pairing(task: DecodeTask, read: DescriptorRead, bases: list[int], mem_type: str, name: str,
             peer: dict[str, Any]) -> DescriptorPairing:
    """One read's transfer: the plan's lists and IDs, then each set of whole pages' descriptors in
    both lists (as vLLM builds every list) with this P rank's IDs of the set."""
    local = nixl_rows(read.local, bases, task.memory.page_bytes, task.dev_id)
    remote = nixl_rows(read.remote, peer["bases"], peer["page_bytes"], peer["dev_id"])
    local_ids, remote_ids = read.local_ids, read.remote_ids
    local_length, remote_length = read.local.length, read.remote.length
    for side in task.sides:
        mine = [r for r in side.reads if r.p_rank == read.p_rank]
        local, local_ids = with_side(local, local_ids, local_length, side.lists, bases, task.dev_id,
                                     [i for r in mine for i in r.local_ids])
        remote, remote_ids = with_side(remote, remote_ids, remote_length, side.prefill_lists, peer["bases"],
                                       peer["dev_id"], [i for r in mine for i in r.remote_ids])
        local_length += side.lists.length
        remote_length += side.prefill_lists.length
    return DescriptorPairing(read.local_list, local, mem_type, name, remote, peer["mem_type"], local_ids, remote_ids)
