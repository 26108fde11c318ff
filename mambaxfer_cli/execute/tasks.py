"""What each rank process of an execute run does, derived from a plan (pure: no torch, no NIXL).

Memory model, per rank: one registered region per SSM tensor holding the engine's logical blocks
as pages, and one region per attention stream holding its kernel blocks as slots of stand-in KV
bytes, so that every descriptor of the plan's lists points at real, checkable memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from mambaxfer_cli.descriptors import ATTENTION_HEAD_BYTES, DescriptorRead, Engine
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.layout import RankLayout, Shard, kv_head_shard
from mambaxfer_cli.model import ATTENTION
from mambaxfer_cli.plan import Plan, attention_slot_bytes, page_bytes
from mambaxfer_cli.reads import Read

INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Memory:
    """The regions one rank registers."""

    ssm_tensors: int
    logical_blocks: int
    page_bytes: int
    attention_streams: int
    kernel_blocks: int
    slot_bytes: int

    @property
    def region_sizes(self) -> tuple[int, ...]:
        return ((self.logical_blocks * self.page_bytes,) * self.ssm_tensors
                + (self.kernel_blocks * self.slot_bytes,) * self.attention_streams)

    @property
    def total_bytes(self) -> int:
        return sum(self.region_sizes)


@dataclass(frozen=True)
class RunSettings:
    run_id: str
    device: str            # "cpu" (DRAM) or "cuda" (VRAM)
    gpus: int              # visible GPUs with --device cuda, else 0
    host: str
    port: int              # P rank r's side channel listens on port + r; 0: any free port
    iters: int

    @property
    def mem_type(self) -> str:
        return "VRAM" if self.device == "cuda" else "DRAM"


@dataclass(frozen=True)
class RankTask:
    role: str              # "P" or "D"
    rank: int
    settings: RunSettings
    dev_id: int            # GPU index for VRAM, 0 for DRAM
    layout: RankLayout
    memory: Memory
    kv_heads: Shard | None  # attention KV heads this rank holds

    @property
    def name(self) -> str:
        return f"{self.role}{self.rank}"

    @property
    def agent(self) -> str:
        return f"mambaxfer-{self.settings.run_id}-{self.name}"


@dataclass(frozen=True)
class PrefillTask(RankTask):
    consumers: tuple[int, ...]   # D ranks that READ from this rank

    @property
    def port(self) -> int:
        return self.settings.port + self.rank if self.settings.port else 0


@dataclass(frozen=True)
class DecodeTask(RankTask):
    reads: tuple[DescriptorRead, ...]       # this D rank's reads, one per source P rank
    segments: tuple[Read, ...]              # the byte reads behind them (to locate wrong bytes)
    prefill_layouts: tuple[RankLayout, ...]
    prefill_memory: Memory
    prefill_kv: tuple[Shard | None, ...]
    ssm_pairs: np.ndarray                   # (n, 2): D logical block, P logical block
    attention_pairs: np.ndarray             # (m, 2): D kernel block, P kernel block

    @property
    def sources(self) -> tuple[int, ...]:
        return tuple(r.p_rank for r in self.reads)


def _slot_bytes(plan: Plan, tp: int) -> int:
    # As the plan sizes attention slots: by KV heads only when the grouping has attention.
    return attention_slot_bytes(plan.model, tp) if plan.grouping.has_attention else ATTENTION_HEAD_BYTES


def _kv_heads(plan: Plan, tp: int, rank: int) -> Shard | None:
    return kv_head_shard(plan.model, tp, rank) if plan.grouping.has_attention else None


def side_memory(plan: Plan, engine: Engine, layout: RankLayout, tp: int) -> Memory:
    return Memory(engine.ssm_tensors, engine.logical_blocks, page_bytes(layout),
                  engine.attention_streams, engine.num_blocks, _slot_bytes(plan, tp))


def request_pairs(plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """Which D block receives which P block: logical for SSM groups, kernel for attention."""
    dm = plan.descriptors
    ssm, attention = [], []
    for kind, p_blocks, d_blocks in zip(dm.groups, dm.request.prefill_blocks, dm.request.decode_blocks):
        p_blocks, d_blocks = np.asarray(p_blocks, np.int64), np.asarray(d_blocks, np.int64)
        if kind == ATTENTION:
            j = np.arange(dm.decode.blocks_per_logical, dtype=np.int64)
            attention.append(np.stack([(d_blocks[:, None] * dm.decode.blocks_per_logical + j).ravel(),
                                       (p_blocks[:, None] * dm.prefill.blocks_per_logical + j).ravel()], 1))
        else:
            ssm.append(np.stack([d_blocks, p_blocks], 1))
    empty = np.zeros((0, 2), np.int64)
    return (np.concatenate(ssm) if ssm else empty), (np.concatenate(attention) if attention else empty)


def _unexecutable(message: str) -> UserError:
    return UserError(f"this plan cannot be executed: {message}")


def _check_twice(pairs: np.ndarray, what: str) -> None:
    blocks, counts = np.unique(pairs[:, 0], return_counts=True)
    if np.any(counts > 1):
        raise _unexecutable(f"D {what} {int(blocks[counts > 1][0])} is written by the request more than "
                            f"once, so the bytes it ends with are not defined")


def _check_ids(read: DescriptorRead, local_page: int, remote_page: int, local_slot: int,
               remote_slot: int) -> None:
    who = f"the read of D{read.d_rank} from P{read.p_rank}"
    if len(read.local_ids) != len(read.remote_ids):
        raise _unexecutable(f"{who} has {len(read.local_ids)} local and {len(read.remote_ids)} remote IDs")
    for side, ids, dlist, page, slot in (("local", read.local_ids, read.local, local_page, local_slot),
                                         ("remote", read.remote_ids, read.remote, remote_page, remote_slot)):
        ids = np.asarray(ids, np.int64)
        bad = ids[(ids < 0) | (ids >= dlist.length)]
        if bad.size:
            raise _unexecutable(f"{who}: {side} ID {int(bad[0])} is outside its list of {dlist.length}")
        if dlist.length > INT32_MAX:
            raise _unexecutable(f"{who}: the {side} list has {dlist.length} descriptors, more than NIXL's "
                                f"32-bit descriptor IDs address")
        where = dlist.resolve(ids)
        limit = np.where(where["attention"], slot, page)
        over = np.flatnonzero(where["offset"] + where["size"] > limit)
        if over.size:
            i = over[0]
            raise _unexecutable(
                f"{who}: {side} ID {int(ids[i])} covers bytes [{int(where['offset'][i])}, "
                f"{int(where['offset'][i] + where['size'][i])}) of a {int(limit[i])}-byte "
                f"{'slot' if where['attention'][i] else 'page'}")
    local, remote = read.local.resolve(read.local_ids), read.remote.resolve(read.remote_ids)
    differ = np.flatnonzero(local["size"] != remote["size"])
    if differ.size:
        i = differ[0]
        raise _unexecutable(f"{who}: descriptor pair {i} moves {int(local['size'][i])} local but "
                            f"{int(remote['size'][i])} remote bytes")


def available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def build_tasks(plan: Plan, settings: RunSettings) -> tuple[list[PrefillTask], list[DecodeTask]]:
    """Every rank's task; raises UserError when the plan cannot be executed as it stands."""
    dm = plan.descriptors
    p_tp, d_tp = plan.prefill.tp, plan.decode.tp
    p_memory = side_memory(plan, dm.prefill, plan.prefill.ranks[0], p_tp)
    d_memory = side_memory(plan, dm.decode, plan.decode.ranks[0], d_tp)
    ssm_pairs, attention_pairs = request_pairs(plan)
    _check_twice(ssm_pairs, "logical block")
    _check_twice(attention_pairs, "attention kernel block")
    for read in dm.reads:
        _check_ids(read, d_memory.page_bytes, p_memory.page_bytes, d_memory.slot_bytes, p_memory.slot_bytes)

    total = p_tp * p_memory.total_bytes + d_tp * d_memory.total_bytes
    free = available_memory()
    if settings.device == "cpu" and free is not None and total > free // 2:
        raise _unexecutable(
            f"its engines need {_gib(total)} of DRAM over {p_tp + d_tp} ranks (P {_gib(p_memory.total_bytes)}, "
            f"D {_gib(d_memory.total_bytes)} each), more than half of the {_gib(free)} available; "
            f"use fewer --blocks or --layers (or plan with fewer --p-num-blocks/--d-num-blocks)")

    consumers: dict[int, list[int]] = {}
    for read in dm.reads:
        consumers.setdefault(read.p_rank, []).append(read.d_rank)
    p_kv = tuple(_kv_heads(plan, p_tp, r) for r in range(p_tp))

    def dev(index: int) -> int:
        return index % settings.gpus if settings.device == "cuda" else 0

    prefill = [PrefillTask("P", r, settings, dev(r), layout, p_memory, p_kv[r],
                           consumers=tuple(sorted(consumers.get(r, ()))))
               for r, layout in enumerate(plan.prefill.ranks)]
    decode = []
    for d, layout in enumerate(plan.decode.ranks):
        kv = _kv_heads(plan, d_tp, d)
        decode.append(DecodeTask(
            "D", d, settings, dev(p_tp + d), layout, d_memory, kv,
            reads=tuple(r for r in dm.reads if r.d_rank == d),
            segments=tuple(r for r in plan.reads if r.d_rank == d),
            prefill_layouts=plan.prefill.ranks, prefill_memory=p_memory, prefill_kv=p_kv,
            ssm_pairs=ssm_pairs,
            attention_pairs=attention_pairs if kv is not None else np.zeros((0, 2), np.int64)))
    return prefill, decode
