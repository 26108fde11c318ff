"""A bench run's rank programs (docs/bench.md): every variant pulled, then pushed, between the same
agents and memory; D poisons before each and checks every byte after it, all ranks in step."""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any, Callable

import numpy as np

from mambaxfer_cli.engines.vllm.transfer.exchange import exchange, fill, layout
from mambaxfer_cli.execute.agent import DescriptorPairing, RankAgent
from mambaxfer_cli.engines.vllm.transfer.bench_variants import DIRECTIONS, LIMIT, limit_check, limit_chunks
from mambaxfer_cli.execute.channel import WAIT_ROUND, Channel, RankFailure
from mambaxfer_cli.execute.memory import RankMemory
from mambaxfer_cli.engines.vllm.transfer.rank import pairing
from mambaxfer_cli.engines.vllm.transfer.results import BenchResult
from mambaxfer_cli.execute.remote import Inbox, p_agent
from mambaxfer_cli.execute.results import Preparation, Tally, Timing
from mambaxfer_cli.execute.side_channel import PortInUse, SideChannelError, SideChannelServer
from mambaxfer_cli.engines.vllm.transfer.tasks import BenchSpec, DecodeTask, PrefillTask
from mambaxfer_cli.engines.vllm.transfer.verify import verify_decode
from mambaxfer_cli.engines.vllm.proof.addresses import nixl_rows

UCX_LOG_BYTES = 1 << 20      # UCX's info log of one rank: its endpoints' configurations (a few KiB)
Idle = Callable[[], None]


def keep_ucx_log() -> int:
    """Have UCX log into an unnamed file of this process (nothing is left on disk, whatever
    happens); before NIXL loads UCX. Returns the file's descriptor."""
    fd = os.memfd_create("mambaxfer-ucx-log")
    os.environ["UCX_LOG_FILE"] = f"/proc/self/fd/{fd}"
    os.environ["UCX_LOG_FILE_SIZE"] = str(UCX_LOG_BYTES)
    return fd


def ucx_config_lines(fd: int) -> tuple[str, ...]:
    """This process's UCX endpoint-configuration lines (UCX logs them at info level); C stdio is
    flushed first."""
    ctypes.CDLL(None).fflush(None)
    with open(f"/proc/self/fd/{fd}", errors="replace") as handle:
        return tuple(line.rstrip("\n") for line in handle if " cfg#" in line)


def _spec(task: PrefillTask | DecodeTask) -> BenchSpec:
    assert isinstance(task.settings.bench, BenchSpec)
    return task.settings.bench


def _starts(ch: Channel, step: str, idle: Idle | None = None) -> Callable[[int], None]:
    """Where every rank meets before iteration ``i`` of ``step`` (-1: the warm-up)."""
    return lambda i: ch.meet(f"{step}:{i}", idle=idle, every=WAIT_ROUND)


def _follow(ch: Channel, step: str, iters: int, idle: Idle) -> None:
    """A rank that does not post in this step meets the initiators at each iteration's start."""
    start = _starts(ch, step, idle)
    for i in range(-1, iters):
        start(i)


def _limit(name: str, task: PrefillTask | DecodeTask, memory: RankMemory, local: int, remote_name: str,
           peer: dict[str, Any], remote: int, size: int) -> DescriptorPairing:
    """A limit variant's transfer: one descriptor of ``size`` bytes on each side (ID 0 of each list)."""
    mine, theirs = (np.array([[addr, size, dev]], dtype=np.uint64)
                    for addr, dev in ((local, task.dev_id), (remote, peer["dev_id"])))
    return DescriptorPairing(name, mine, memory.mem_type, remote_name, theirs, peer["mem_type"], (0,), (0,))


def bench_decode(task: DecodeTask, ch: Channel) -> BenchResult:
    spec = _spec(task)
    ucx_log = keep_ucx_log()
    with RankAgent(task, ch, telemetry=True) as node:
        memory = node.memory
        node.poison_and_register(ch)
        ch.publish("registered", {"metadata": node.agent.get_agent_metadata(), "bases": memory.bases,
                                  "mem_type": memory.mem_type, "dev_id": task.dev_id,
                                  "page_bytes": task.memory.page_bytes})
        published = exchange(task, ch, node)
        ch.phase("preparing")
        inbox = Inbox(node.agent)     # polled while P writes: it progresses this agent and keeps what came

        xfers, prep = {}, {}
        for name, reads in spec.variants:     # a bench task has no whole pages: the plan's reads alone
            pairings = [pairing(task, read, memory.bases, memory.mem_type, *published[read.p_rank])
                        for read in reads.get(task.rank, ())]
            xfers[name], prep[name] = node.prepare("READ", pairings, ch)
        limit = []
        for p_rank, offset, size in limit_chunks(task.reads):
            r_name, peer = published[p_rank]
            limit.append(_limit(f"limit:{p_rank}", task, memory, memory.bases[0] + offset, r_name, peer,
                                peer["regions"][0][0], size))
        xfers[LIMIT], prep[LIMIT] = node.prepare("READ", limit, ch)
        ch.meet("prepared")
        timings: dict[str, Timing] = {}
        checks: dict[str, Tally] = {}
        for direction in DIRECTIONS:
            for name in spec.order:
                step = f"{direction}:{name}"
                ch.phase("poisoning", f"{direction} {name}")
                memory.poison()
                memory.sync()
                ch.meet(step)
                ch.phase("transferring", f"{direction} {name}")
                if direction == "READ":
                    timings[step] = node.timed(xfers[name], spec.iters, ch, "transfer", b"", _starts(ch, step))
                else:
                    _follow(ch, step, spec.iters, inbox.poll)
                    _wait_notifs(inbox, ch, f"{step}:done".encode(), task)
                memory.sync()
                ch.phase("verifying", f"{direction} {name}")
                regions = [memory.fetch(i) for i in range(memory.count)]

                def tick(detail: str, step: str = f"{direction} {name}") -> None:
                    ch.progress(f"{step}: {detail}")

                checks[step] = (limit_check(task, regions, tick) if name == LIMIT else
                                verify_decode(spec.decode_tasks[name][task.rank], regions, tick).tally())
                ch.meet(f"{step}:checked")
        return BenchResult("D", task.rank, timings=timings, preparations=prep, checks=checks,
                           ucx_lines=ucx_config_lines(ucx_log))


def _wait_notifs(inbox: Inbox, ch: Channel, message: bytes, task: DecodeTask) -> None:
    waiting = {f"P{p}": p_agent(task, p) for p in task.sources}
    ch.waiting("the WRITE notifications of " + ", ".join(sorted(waiting)))
    polls = 0
    while waiting:
        polls += 1
        if polls % 1024 == 0:
            ch.check_stop()
        inbox.poll()
        waiting = {p: name for p, name in waiting.items() if (name, message) not in inbox.plain}
        if waiting:
            time.sleep(0.0002)


def bench_prefill(task: PrefillTask, ch: Channel) -> BenchResult:
    spec = _spec(task)
    ucx_log = keep_ucx_log()
    with RankAgent(task, ch, telemetry=True) as node:
        memory = node.memory
        ch.phase("filling")
        fill(task, memory, ch.progress)
        node.register(ch)
        try:
            server = SideChannelServer(task.settings.host, task.port)
        except (PortInUse, SideChannelError) as exc:
            raise RankFailure(str(exc)) from None
        header, metadata = layout(task, memory), node.agent.get_agent_metadata()
        unserved = set(task.consumers)

        def serve() -> None:
            """While waiting: drive the agent (no progress thread: D's READs need this rank's
            progress) and answer the D ranks that fetch this rank's metadata."""
            node.agent.get_new_notifs()
            if unserved:
                request = server.serve(lambda r: (header, metadata), 0, ch.check_stop)
                if request is not None:
                    unserved.discard(request.get("d_rank"))

        try:
            ch.publish("listening", server.port)
            ch.phase("serving")
            decoders = ch.gather("registered", "D", "the D ranks to register", idle=serve, every=WAIT_ROUND)
            names = {d: node.add_remote(decoders[d]["metadata"]) for d in task.consumers}
            xfers: dict[str, list[Any]] = {}
            prep: dict[str, Preparation] = {}
            for variant, reads in spec.variants:
                pairings = [DescriptorPairing(
                    read.remote, nixl_rows(read.remote, memory.bases, task.memory.page_bytes, task.dev_id),
                    memory.mem_type, names[d], nixl_rows(read.local, peer["bases"], peer["page_bytes"], peer["dev_id"]),
                    peer["mem_type"], read.remote_ids, read.local_ids)
                    for d in task.consumers for peer in [decoders[d]]
                    for read in reads.get(d, ()) if read.p_rank == task.rank]
                xfers[variant], prep[variant] = node.prepare("WRITE", pairings, ch)
            limit = [_limit(f"limit:{d}", task, memory, memory.bases[0], names[d], decoders[d],
                            decoders[d]["bases"][0] + offset, size)
                     for d in task.consumers for p_rank, offset, size in limit_chunks(spec.variants[0][1][d])
                     if p_rank == task.rank]
            xfers[LIMIT], prep[LIMIT] = node.prepare("WRITE", limit, ch)
            ch.meet("prepared", idle=serve, every=WAIT_ROUND)
            timings: dict[str, Timing] = {}
            for direction in DIRECTIONS:
                for name in spec.order:
                    step = f"{direction}:{name}"
                    ch.meet(step, idle=serve, every=WAIT_ROUND)
                    if direction == "WRITE":
                        ch.phase("transferring", f"WRITE {name}")
                        timings[step] = node.timed(xfers[name], spec.iters, ch, "transfer", f"{step}:done".encode(),
                                                   _starts(ch, step, serve))
                    else:
                        _follow(ch, step, spec.iters, serve)
                    ch.meet(f"{step}:checked", idle=serve, every=WAIT_ROUND)
            return BenchResult("P", task.rank, timings=timings, preparations=prep,
                               ucx_lines=ucx_config_lines(ucx_log))
        finally:
            server.close()
