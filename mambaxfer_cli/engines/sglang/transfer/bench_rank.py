"""The rank programs of ``bench --engine sglang``: execute's SGLang steps, then each variant
(planned, limit) posted ``iters`` times by the P ranks and checked once by the D ranks."""

from __future__ import annotations

import numpy as np

from mambaxfer_cli.engines.sglang.transfer.bench import LIMIT, ORDER, PLANNED, SlotBenchDecode, SlotBenchPrefill
from mambaxfer_cli.execute.agent import DescriptorPairing, RankAgent, Tick
from mambaxfer_cli.execute.channel import Channel
from mambaxfer_cli.execute.faults import fault
from mambaxfer_cli.execute.memory import RankMemory
from mambaxfer_cli.engines.sglang.transfer.run import P_SLOTS, pattern_block, poison
from mambaxfer_cli.engines.sglang.transfer.rank import (
    Check, await_notifications, connect, entry_item, fill_and_register, planned_pairings, poison_all, start_target,
)
from mambaxfer_cli.engines.sglang.transfer.results import SlotBenchResult
from mambaxfer_cli.execute.results import Tally

def _message(task: SlotBenchPrefill | SlotBenchDecode, variant: str, iteration: int) -> bytes:
    return f"{task.settings.run_id}-{variant}-{iteration}".encode()


def prefill(task: SlotBenchPrefill, ch: Channel) -> SlotBenchResult:
    with RankAgent(task, ch, telemetry=True) as node:
        fill_and_register(task, ch, node)
        connected = connect(task, ch, node)
        ch.phase("preparing")
        planned, planned_prep = node.prepare("WRITE", planned_pairings(task, node, connected), ch)
        base, dev = node.memory.bases[0], task.dev_id
        limit, limit_prep = node.prepare("WRITE", [
            DescriptorPairing(("limit", d_rank), np.array([[base, size, dev]], dtype=np.uint64), node.memory.mem_type,
                              name, np.array([[header["bases"][0] + offset, size, header["dev_id"]]], dtype=np.uint64),
                              header["mem_type"], [0], [0])
            for (d_rank, offset, size), (name, header) in zip(task.limit, connected)], ch)
        ch.meet("prepared", None, "every rank to prepare", milestone=True)
        timings = {}
        targets = [f"D{d_rank}" for d_rank, _ in task.writes]    # connect's order, as both variants'
        for variant, xfers in ((PLANNED, planned), (LIMIT, limit)):
            ch.meet(f"{variant} ready", None, "the D ranks to poison")
            fault(task, "transfer")

            def start(i: int, variant: str = variant) -> None:
                ch.phase("transferring", f"{variant} {i + 1}/{task.iters}")

            # Only the last WRITE notifies, as vLLM's bench: a notification's WRITE completes
            # when D next polls (every WAIT_ROUND), which is D's cadence, not the transfer's.
            timings[variant] = node.timed(xfers, task.iters, ch, "WRITE", _message(task, variant, task.iters - 1),
                                          start, warm_up=False, targets=targets)
        ch.meet("checked", None, "the D ranks to check")
        return SlotBenchResult("P", task.rank, timings, {PLANNED: planned_prep, LIMIT: limit_prep}, {})


def decode(task: SlotBenchDecode, ch: Channel) -> SlotBenchResult:
    with RankAgent(task, ch, telemetry=False) as node:
        start_target(task, ch, node)
        ch.meet("prepared", None, "every rank to prepare", milestone=True)
        checks = {}
        for variant in ORDER:
            if variant != ORDER[0]:
                ch.phase("poisoning", variant)
                poison_all(node.memory, poison(0))
            ch.meet(f"{variant} ready", None, "the P ranks to post")
            ch.phase("receiving", variant)
            await_notifications(task, ch, node, _message(task, variant, task.iters - 1))
            ch.phase("verifying", variant)
            if variant == PLANNED:     # execute's check of one round: a byte wrong, missing or beyond is bad
                check = Check(task)
                check.round(node.memory, 0, ch.progress)
                checks[variant] = Tally(check.checked, check.result().bad)
            else:
                checks[variant] = limit_check(task, node.memory, ch.progress)
        ch.meet("checked", None, "the P ranks to finish")
        return SlotBenchResult("D", task.rank, {}, {}, checks)


def _prefill_bytes(task: SlotBenchDecode, p_rank: int, size: int) -> np.ndarray:
    """The first ``size`` bytes of P rank ``p_rank``'s region, as it fills it."""
    out = np.empty(size, dtype=np.uint8)
    at = 0
    source = task.prefill[p_rank]
    for entry in source.entries:
        for slot in range(P_SLOTS):
            if at >= size:
                return out
            row = entry_item(source, entry, pattern_block(slot, 0))
            n = min(row.size, size - at)
            out[at:at + n] = row[:n]
            at += n
    return out


def limit_check(task: SlotBenchDecode, memory: RankMemory, tick: Tick) -> Tally:
    """Each writer's chunk holds that P rank's first bytes; the rest of D's region poison."""
    flat = np.concatenate([memory.fetch(i).reshape(-1) for i in range(memory.count)])
    covered = np.zeros(flat.size, dtype=bool)
    wrong = 0
    for p_rank, offset, size in task.limit:
        wrong += int(np.count_nonzero(flat[offset:offset + size] != _prefill_bytes(task, p_rank, size)))
        covered[offset:offset + size] = True
        tick(f"P{p_rank}'s bytes")
    wrong += int(np.count_nonzero(flat[~covered] != poison(0)))
    return Tally(flat.size, wrong)
