"""The rank programs of SGLang's transfer (``engines/sglang/transfer/run.py``), each in its own
process with its own NIXL agent: P posts one WRITE per D rank each round, D checks every byte."""

from __future__ import annotations

import time
from functools import partial
from typing import Any, Sequence

import numpy as np

from mambaxfer_cli.engines.sglang.entries import TransferEntry
from mambaxfer_cli.engines.sglang.kv import KV_BUFFERS, KVRank
from mambaxfer_cli.engines.sglang.plan import Descriptor
from mambaxfer_cli.engines.sglang.proof import entry_item as state_item
from mambaxfer_cli.execute.agent import DescriptorPairing, RankAgent, Tick
from mambaxfer_cli.execute.channel import WAIT_ROUND, Channel, RankFailure
from mambaxfer_cli.execute.faults import fault
from mambaxfer_cli.execute.memory import RankMemory
from mambaxfer_cli.engines.sglang.transfer.run import (
    SlotDecodeTask, SlotPrefillTask, SlotTask, holds, pattern_block, poison,
)
from mambaxfer_cli.engines.sglang.transfer.results import (
    FieldCount, FirstWrong, SlotDecodeResult, SlotPrefillResult, WriteTiming,
)
from mambaxfer_cli.execute.side_channel import SideChannelServer, fetch_peers, listen, replies

def round_notification(task: SlotTask, round_: int) -> bytes:
    """What a P rank's WRITEs of a round notify (NIXL sends it once their bytes are on D)."""
    return f"{task.settings.run_id}-round{round_}".encode()


def fill_slot(task: SlotTask, memory: RankMemory, slot: int, round_: int, tick: Tick) -> None:
    """One slot of every entry: the pattern of the units this rank keeps there, per layer."""
    for index, entry in enumerate(task.entries):
        host = memory.host(index)
        if memory.device == "cuda":
            host[:] = memory.fetch(index)
        host[slot] = entry_item(task, entry, pattern_block(slot, round_))
        memory.store(index, host)
        tick(f"round {round_ + 1}, entry {index + 1} of {len(task.entries)}")
    memory.sync()


def entry_item(task: SlotTask, entry: TransferEntry, block: int) -> np.ndarray:
    """What one item of an entry holds for a block of the pattern: a state slot, or a KV page."""
    kv = kv_of(task, entry)
    if kv is not None and entry.field in KV_BUFFERS:
        return kv.page(entry.field, block, entry.layer_id)
    return state_item(task.layout, entry, block)


def kv_of(task: SlotTask, entry: TransferEntry) -> KVRank | None:
    """The KV page layout of an entry: the draft's for its band, else the target's."""
    return task.draft_kv if task.draft_kv is not None and entry.layer_id >= task.draft_band else task.kv


def poison_all(memory: RankMemory, value: int) -> None:
    memory.poison(value)
    memory.sync()


def published_layout(task: SlotTask, node: RankAgent) -> dict[str, Any]:
    return {"agent": task.agent, "rank": task.rank, "mem_type": node.memory.mem_type, "dev_id": task.dev_id,
            "bases": node.memory.bases, "item_lens": [e.item_len for e in task.entries],
            "slots": task.memory.logical_blocks}


def descriptor_rows(descriptors: Sequence[Descriptor], bases: list[int], dev_id: int, source: bool) -> np.ndarray:
    rows = np.empty((len(descriptors), 3), dtype=np.uint64)
    for i, d in enumerate(descriptors):
        entry, offset = (d.src_entry, d.src_offset) if source else (d.dst_entry, d.dst_offset)
        rows[i] = (bases[entry] + offset, d.length, dev_id)
    return rows


# --- the prefill side: the initiator ------------------------------------------------------------


def fill_and_register(task: SlotTask, ch: Channel, node: RankAgent) -> float:
    """A P rank's start: every slot of its entries filled with the pattern, then registered; the
    fill's seconds."""
    ch.phase("filling")
    started = time.perf_counter()
    for slot in range(task.memory.logical_blocks):
        fill_slot(task, node.memory, slot, 0, ch.progress)
    fill_s = time.perf_counter() - started
    fault(task, "fill")
    node.register(ch)
    return fill_s


def prefill(task: SlotPrefillTask, ch: Channel) -> SlotPrefillResult:
    with RankAgent(task, ch, telemetry=True) as node:
        fill_s = fill_and_register(task, ch, node)
        pairings = planned_pairings(task, node, connect(task, ch, node))
        fault(task, "prepare")
        ch.phase("preparing")
        xfers, prep = node.prepare("WRITE", pairings, ch)
        ch.meet("prepared", None, "every rank to prepare", milestone=True)
        times: list[list[float]] = [[] for _ in xfers]
        for round_ in range(task.rounds):
            if round_:
                ch.phase("filling", f"round {round_ + 1}")
                fill_slot(task, node.memory, task.slot, round_, ch.progress)
            ch.meet(f"round {round_}", None, "the D ranks to poison")
            fault(task, "transfer")
            ch.phase("transferring", f"round {round_ + 1}/{task.rounds}")
            for xfer_times, took in zip(times, node.post(xfers, round_notification(task, round_), ch, "WRITE",
                                                         [f"D{d}" for d, _ in task.writes])):
                xfer_times.append(took)
        telemetry = node.telemetry(xfers)
        ch.meet("received", None, "the D ranks to check the last round")
        return SlotPrefillResult(task.rank, fill_s, prep.prep_s + prep.make_s, write_timings(task, telemetry, times))


def write_timings(task: SlotPrefillTask, telemetry: list[Any], times: list[list[float]]) -> tuple[WriteTiming, ...]:
    """Each WRITE's descriptors (as planned and as NIXL merged them), bytes and times."""
    return tuple(WriteTiming(d_rank, len(descriptors), int(t.descCount), sum(x.length for x in descriptors),
                             tuple(xfer_times))
                 for (d_rank, descriptors), t, xfer_times in zip(task.writes, telemetry, times))


def planned_pairings(task: SlotPrefillTask, node: RankAgent,
                     connected: list[tuple[str, dict[str, Any]]]) -> list[DescriptorPairing]:
    """One WRITE per D rank (``connect``'s), of the plan's descriptors to it."""
    return [DescriptorPairing(
        d_rank, descriptor_rows(descriptors, node.memory.bases, task.dev_id, True), node.memory.mem_type,
        name, descriptor_rows(descriptors, header["bases"], header["dev_id"], False), header["mem_type"],
        range(len(descriptors)), range(len(descriptors)))
        for (d_rank, descriptors), (name, header) in zip(task.writes, connected)]


def connect(task: SlotPrefillTask, ch: Channel, node: RankAgent) -> list[tuple[str, dict[str, Any]]]:
    """Each D rank this P rank writes into (``task.writes``' order): its agent loaded, and what it
    published (base addresses, item lengths), checked against the plan."""
    return fetch_peers(task, ch, node, "D", [d for d, _ in task.writes], partial(check_decode_layout, task))


def check_decode_layout(task: SlotPrefillTask, d_rank: int, published: dict[str, Any]) -> None:
    want = task.decode_memory
    expected = {"rank": d_rank, "item_lens": list(want.item_lens), "slots": want.logical_blocks}
    for key, value in expected.items():
        if published.get(key) != value:
            raise RankFailure(f"D{d_rank} publishes {key}={published.get(key)}, the plan expects {value}")


# --- the decode side: the target --------------------------------------------------------------


def decode(task: SlotDecodeTask, ch: Channel) -> SlotDecodeResult:
    with RankAgent(task, ch, telemetry=False) as node:
        start_target(task, ch, node)
        ch.meet("prepared", None, "every rank to prepare", milestone=True)
        check = Check(task)
        for round_ in range(task.rounds):
            if round_:
                ch.phase("poisoning", f"round {round_ + 1}")
                poison_all(node.memory, poison(round_))
            ch.meet(f"round {round_}", None, "the P ranks to fill")
            ch.phase("receiving", f"round {round_ + 1}/{task.rounds}")
            await_notifications(task, ch, node, round_notification(task, round_))
            ch.phase("verifying", f"round {round_ + 1}/{task.rounds}")
            check.round(node.memory, round_, ch.progress)
        ch.meet("received", None, "the P ranks to finish")
        return check.result()


def start_target(task: SlotDecodeTask, ch: Channel, node: RankAgent) -> None:
    """A D rank's start: poisoned, registered, each writer's metadata request answered."""
    node.poison_and_register(ch)
    listen(task.settings.host, task.port, lambda server: serve_writers(task, ch, node, server))


def serve_writers(task: SlotDecodeTask, ch: Channel, node: RankAgent, server: SideChannelServer) -> None:
    """Answer each writer's metadata request (a P rank asks once)."""
    reply = replies(task, ch, server, published_layout(task, node), node.agent.get_agent_metadata(), "P")
    waiting = set(task.writers)
    while waiting:
        ch.check_stop()
        ch.waiting("the metadata requests of " + ", ".join(f"P{p}" for p in sorted(waiting)))
        request = server.serve(reply, WAIT_ROUND * 50, ch.check_stop)
        if request is not None and request.get("p_rank") in waiting:
            waiting.discard(request["p_rank"])


def await_notifications(task: SlotDecodeTask, ch: Channel, node: RankAgent, final: bytes) -> None:
    """Until every writer's WRITE with this message notified (NIXL sends it once the bytes are here)."""
    waiting = set(task.writers)
    while waiting:
        ch.check_stop()
        ch.waiting("the WRITE notifications of " + ", ".join(f"P{p}" for p in sorted(waiting)))
        waiting -= node.notified("P", final)
        if waiting:
            time.sleep(WAIT_ROUND)


class Check:
    """Every byte of every entry, round after round: a request slot's byte right (the pattern every
    round) or untouched (the poison every round); any other slot's the poison every round."""

    def __init__(self, task: SlotDecodeTask) -> None:
        self.task = task
        self.right = [np.ones(e.item_len, dtype=bool) for e in task.entries]
        self.untouched = [np.ones(e.item_len, dtype=bool) for e in task.entries]
        self.stray = [np.zeros((task.memory.logical_blocks - 1, e.item_len), dtype=bool) for e in task.entries]
        self.last: list[tuple[np.ndarray, np.ndarray]] = []
        self.checked = 0
        self.seconds = 0.0

    def round(self, memory: RankMemory, round_: int, tick: Tick) -> None:
        started = time.perf_counter()
        task, value = self.task, poison(round_)
        self.last = []
        others = [s for s in range(task.memory.logical_blocks) if s != task.slot]
        for index, entry in enumerate(task.entries):
            got = memory.fetch(index)
            want = entry_item(task, entry, pattern_block(task.p_slot, round_))
            mine = got[task.slot]
            self.right[index] &= mine == want
            self.untouched[index] &= mine == value
            self.stray[index] |= got[others] != value
            self.last.append((want, mine.copy()))
            self.checked += got.size
            tick(f"{f'round {round_ + 1}, ' if task.rounds > 1 else ''}entry {index + 1} of {len(task.entries)}")
        self.seconds += time.perf_counter() - started

    def result(self) -> SlotDecodeResult:
        task = self.task
        counts: dict[str, list[int]] = {}
        first = None
        for index, entry in enumerate(task.entries):
            wrong = ~self.right[index] & ~self.untouched[index]
            missing = ~self.right[index] & self.untouched[index]
            row = counts.setdefault(entry.field, [0, 0, 0, 0, entry.item_len])
            row[0] += 1
            row[1] += int(np.count_nonzero(wrong))
            row[2] += int(np.count_nonzero(missing))
            row[3] += int(np.count_nonzero(self.stray[index]))
            bad = np.flatnonzero(wrong | missing)
            if first is None and bad.size:
                at = int(bad[0])
                want, found = self.last[index]
                where = holds(task.layout, entry.field, at, kv_of(task, entry), entry.outer_count)
                first = FirstWrong(entry.field, entry.layer_id, at, where, int(want[at]), int(found[at]),
                                   "wrong" if wrong[at] else "missing")
        fields = tuple(FieldCount(name, layers, size, wrong, missing, beyond)
                       for name, (layers, wrong, missing, beyond, size) in counts.items())
        return SlotDecodeResult(task.rank, task.writers, len(task.entries), self.checked, fields, first,
                                self.seconds)
