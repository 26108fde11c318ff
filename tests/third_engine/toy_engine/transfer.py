"""The toy's transfer for real: one process per rank through the shared coordinator, each with its
NIXL agent and DRAM; P WRITEs each layer's whole state into every D rank it serves, D checks every
byte of every round."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from mambaxfer_cli.execute.agent import DescriptorPairing, RankAgent
from mambaxfer_cli.execute.channel import WAIT_ROUND, Channel
from mambaxfer_cli.execute.coordinator import Progress, run_ranks
from mambaxfer_cli.execute.results import RankResult
from mambaxfer_cli.execute.tasks import Memory, RankTask, RunSettings
from toy_engine.check import expected
from toy_engine.plan import D_SLOTS, P_SLOTS, ToyPlan, Write, pattern


@dataclass(frozen=True)
class ToyTask(RankTask):
    writes: tuple[Write, ...] = ()      # P: its writes; D: the writes into it
    rounds: int = 1

    @property
    def program(self) -> str:
        return f"toy_engine.transfer:{'prefill' if self.role == 'P' else 'decode'}"


@dataclass(frozen=True)
class Written(RankResult):
    rank: int
    seconds: tuple[float, ...]          # each round's WRITEs, posted until done


@dataclass(frozen=True)
class Checked(RankResult):
    rank: int
    checked: int
    wrong: int


def _notif(task: ToyTask, round_: int) -> bytes:
    return f"{task.settings.run_id}-round{round_}".encode()


def _rows(bases: list[int], writes: list[Write], source: bool) -> np.ndarray:
    return np.array([(bases[w.layer] + (w.src_offset if source else w.dst_offset), w.length, 0) for w in writes],
                    dtype=np.uint64)


def prefill(task: ToyTask, ch: Channel) -> Written:
    with RankAgent(task, ch, telemetry=False) as node:
        ch.phase("filling")
        for layer in range(task.memory.tensors):
            host = node.memory.host(layer)
            for slot in range(P_SLOTS):
                host[slot] = pattern(task.layout, layer, slot)
        node.register(ch)
        peers = ch.gather("metadata", "D", "the D ranks to register")
        pairings = []
        for d_rank in sorted({w.d_rank for w in task.writes}):
            mine = [w for w in task.writes if w.d_rank == d_rank]
            name = node.add_remote(peers[d_rank]["agent"])
            pairings.append(DescriptorPairing(d_rank, _rows(node.memory.bases, mine, True), "DRAM", name,
                                              _rows(peers[d_rank]["bases"], mine, False), "DRAM",
                                              range(len(mine)), range(len(mine))))
        xfers, _ = node.prepare("WRITE", pairings, ch)
        seconds = []
        for round_ in range(task.rounds):
            ch.meet(f"round {round_}", None, "the D ranks to poison")
            ch.phase("writing", f"round {round_ + 1}/{task.rounds}")
            seconds.append(node.transfer(xfers, _notif(task, round_), ch, "WRITE"))
        ch.meet("checked", None, "the D ranks to check")
        return Written(task.rank, tuple(seconds))


def decode(task: ToyTask, ch: Channel) -> Checked:
    writers = {w.p_rank for w in task.writes}
    with RankAgent(task, ch, telemetry=False) as node:
        node.poison_and_register(ch)
        ch.publish("metadata", {"agent": node.agent.get_agent_metadata(), "bases": node.memory.bases})
        checked = wrong = 0
        for round_ in range(task.rounds):
            if round_:
                node.memory.poison()
            ch.meet(f"round {round_}", None, "the P ranks to fill")
            ch.phase("receiving", f"round {round_ + 1}/{task.rounds}")
            waiting = set(writers)
            while waiting:
                ch.check_stop()
                for sender, messages in node.agent.get_new_notifs().items():
                    sender = sender.decode() if isinstance(sender, bytes) else sender
                    if _notif(task, round_) in messages and sender.startswith(f"mambaxfer-{task.settings.run_id}-P"):
                        waiting.discard(int(sender.rsplit("-P", 1)[1]))
                if waiting:
                    time.sleep(WAIT_ROUND)
            ch.phase("verifying", f"round {round_ + 1}/{task.rounds}")
            for layer in range(task.memory.tensors):
                got = node.memory.fetch(layer)
                wrong += int(np.count_nonzero(got != expected(task.layout, layer)))
                checked += got.size
        ch.meet("checked", None, "the other ranks")
        return Checked(task.rank, checked, wrong)


def run(plan: ToyPlan, settings: RunSettings, rounds: int, timeout: float, progress: Progress) -> dict[str, Any]:
    """The run's document: what moved, each round's seconds, every byte verified or not."""
    size, layers = plan.state_bytes, plan.layers
    tasks: list[RankTask] = [
        ToyTask("P", p, settings, 0, plan.whole, Memory(layers, P_SLOTS, size),
                tuple(w for w in plan.writes if w.p_rank == p), rounds) for p in range(plan.p_tp)]
    tasks += [ToyTask("D", d, settings, 0, plan.whole, Memory(layers, D_SLOTS, size),
                      tuple(w for w in plan.writes if w.d_rank == d), rounds) for d in range(plan.d_tp)]
    results = run_ranks(tasks, settings.run_id, timeout, progress).results.values()
    checked = [r for r in results if isinstance(r, Checked)]
    per_round = [max(s) for s in zip(*(r.seconds for r in results if isinstance(r, Written)))]
    wrong = sum(r.wrong for r in checked)
    return {"engine": "toy", "model": plan.model.name, "p_tp": plan.p_tp, "d_tp": plan.d_tp,
            "device": settings.device, "writes": len(plan.writes), "bytes_per_round": plan.bytes_moved,
            "rounds": rounds, "bytes_checked": sum(r.checked for r in checked), "wrong_bytes": wrong,
            "verified": wrong == 0, "median_s": statistics.median(per_round),
            "gb_per_s": plan.bytes_moved / statistics.median(per_round) / 1e9}
