"""From a plan's reads to NIXL descriptor lists and descriptor IDs (docs/reference.md §4), in plain
Python (``plan`` imports no numpy); IDs and request blocks are ``array('q')``, which numpy reads
without a copy. Where the IDs point in memory: ``proof.addresses``."""

from __future__ import annotations

import random
from array import array
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Iterable, Sequence

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.kv_groups import PLE, KVGrouping
from mambaxfer_cli.planning.model import ATTENTION, SSM

@dataclass(frozen=True)
class ListShape:
    tensors: int
    ssm_tensors: int
    attention_streams: int
    num_blocks: int
    blocks_per_logical: int
    ssm_regions: int            # k of the engine's base list
    # NIXL regions the list numbers where they are not the tensors' attention streams (GLM-5-Next's
    # views of its block rows: glm5next.regions), each with its own attention descriptors; 0: the streams
    regions: int = 0

    def __post_init__(self) -> None:
        if self.num_blocks < 1 or self.blocks_per_logical < 1:
            raise UserError("the number of kernel blocks and blocks per logical block must be >= 1")
        if self.num_blocks < self.blocks_per_logical:
            raise UserError(f"{self.num_blocks} kernel blocks hold no whole logical block of "
                            f"{self.blocks_per_logical} kernel blocks")

    @property
    def logical_blocks(self) -> int:
        return self.num_blocks // self.blocks_per_logical

    @property
    def fa_regions(self) -> int:
        """The regions (streams) that hold attention descriptors, ``F``."""
        return self.regions or self.attention_streams

    @property
    def attention_descs(self) -> int:
        return self.fa_regions * self.num_blocks

    @property
    def streams_per_tensor(self) -> int:
        return self.attention_streams // self.tensors

    def ssm_descs(self, k: int | None = None) -> int:
        return self.ssm_tensors * (self.ssm_regions if k is None else k) * self.logical_blocks

    def to_dict(self) -> dict[str, Any]:
        return {"tensors": self.tensors, "ssm_tensors": self.ssm_tensors,
                "attention_streams": self.attention_streams, "num_blocks": self.num_blocks,
                "blocks_per_logical": self.blocks_per_logical,
                "attention_descs": self.attention_descs, "ssm_descs": self.ssm_descs()} | (
                    {"regions": self.regions} if self.regions else {})


def list_shape(grouping: KVGrouping, num_blocks: int, blocks_per_logical: int,
                streams_per_tensor: int, ssm_regions: int) -> ListShape:
    if streams_per_tensor not in (1, 2):
        raise UserError("attention streams per KV-cache tensor must be 1 (vLLM) or 2 (split K and V)")
    return ListShape(grouping.tensors, grouping.ssm_tensors, grouping.tensors * streams_per_tensor,
                  num_blocks, blocks_per_logical, ssm_regions)


@dataclass(frozen=True)
class DescriptorList:
    """One prepared list: where each descriptor points, relative to its block."""

    engine: ListShape
    regions: tuple[tuple[int, int], ...]     # SSM (offset, size) in a page, k of them
    attention: tuple[tuple[int, int], ...]   # (offset, size) pieces of a stream's kernel block

    @property
    def k(self) -> int:
        return len(self.regions)

    @property
    def pieces(self) -> int:
        return len(self.attention)

    @property
    def attention_descs(self) -> int:
        return self.engine.attention_descs * self.pieces

    @property
    def length(self) -> int:
        return self.attention_descs + self.engine.ssm_descs(self.k)


def block_ids(dlist: DescriptorList, groups: Sequence[str], blocks: Sequence[Iterable[int]],
              attention_slots: Sequence[Iterable[int] | None] | None = None,
              group_tensors: Sequence[int] | None = None,
              group_streams: Sequence[Sequence[int] | None] | None = None) -> array[int]:
    """The IDs of one read for a request, groups concatenated, each region-major (stream-major for attention),
    over the slots, tensors and streams given per group (default: its kind's every tensor)."""
    eng = dlist.engine
    out: array[int] = array("q")
    for index, (kind, logical) in enumerate(zip(groups, blocks)):
        slots = attention_slots[index] if attention_slots is not None else None
        tensors = group_tensors[index] if group_tensors is not None else eng.ssm_tensors if kind == SSM else eng.tensors
        if kind == PLE:     # the one PLE descriptor after the SSM ones (vLLM's numbering only)
            firsts, ids = [dlist.attention_descs + eng.ssm_descs(dlist.k)], slots or ()
        elif kind != SSM:
            if slots is None:
                continue
            chosen = group_streams[index] if group_streams is not None else None
            streams = range(tensors * eng.streams_per_tensor) if chosen is None else chosen
            firsts, ids = [stream * eng.num_blocks * dlist.pieces for stream in streams], slots
        else:
            firsts, ids = [dlist.attention_descs + q * eng.logical_blocks for q in range(tensors * dlist.k)], logical
        values = integers(ids)
        for first in firsts:
            out.fromlist([first + value for value in values])
    return out


def integers(values: Iterable[int]) -> list[int]:
    """Block IDs or slots as Python ints (from a list, an ``array`` or any sequence of integers)."""
    return list(map(int, values))


def kernel_blocks(logical: Iterable[int], blocks_per_logical: int) -> list[int]:
    """Attention logical blocks expanded into kernel blocks with one engine's own ratio."""
    return [block * blocks_per_logical + j for block in integers(logical) for j in range(blocks_per_logical)]


@dataclass(frozen=True)
class Request:
    """Logical block IDs of one request, one array per KV-cache group, on each side."""

    prefill_blocks: tuple[array[int], ...]
    decode_blocks: tuple[array[int], ...]

    def to_dict(self) -> dict[str, list[list[int]]]:
        return {"prefill_blocks": [b.tolist() for b in self.prefill_blocks],
                "decode_blocks": [b.tolist() for b in self.decode_blocks]}


def random_request(prefill_counts: Sequence[int], decode_counts: Sequence[int], prefill: ListShape,
                   decode: ListShape, seed: int) -> Request:
    """Distinct, non-contiguous logical blocks on each side (seeded), as a busy engine hands out:
    ``counts[g]`` blocks for group ``g``."""
    rng = random.Random(seed)
    sides = []
    for engine, counts in ((prefill, prefill_counts), (decode, decode_counts)):
        need = int(sum(counts))
        if need > engine.logical_blocks:
            raise UserError(f"a request of {need} logical blocks ({', '.join(map(str, counts))} per KV-cache "
                            f"group) does not fit an engine of {engine.logical_blocks} logical blocks")
        chosen = rng.sample(range(engine.logical_blocks), need)
        starts = list(accumulate(counts, initial=0))
        sides.append(tuple(array("q", chosen[a:b]) for a, b in zip(starts, starts[1:])))
    return Request(*sides)


def parse_blocks(text: str, n_groups: int, engine: ListShape, side: str) -> tuple[array[int], ...]:
    """``'3,5;1;2'``: block IDs per group, groups separated by ';' (each block once in the request)."""
    try:
        lists = [array("q", [int(x) for x in part.split(",") if x.strip()]) for part in text.split(";")]
    except (ValueError, OverflowError):   # OverflowError: beyond int64, no block ID
        shown = text if len(text) <= 60 else f"{text[:57]}..."
        raise UserError(f"--{side}-blocks: '{shown}' is not a list of integers like '3,5;1;2'") from None
    if len(lists) == 1:
        lists = lists * n_groups
    if len(lists) != n_groups:
        raise UserError(f"--{side}-blocks gives {len(lists)} groups, the model has {n_groups} KV-cache groups")
    for blocks in lists:
        bad = next((block for block in blocks if not 0 <= block < engine.logical_blocks), None)
        if bad is not None:
            raise UserError(f"--{side}-blocks: block {bad} is outside the {side} engine's "
                            f"{engine.logical_blocks} logical blocks")
    empty = next((group for group, blocks in enumerate(lists) if not blocks), None)
    if empty is not None:
        raise UserError(f"--{side}-blocks: group {empty} has no block; a request gives each group at least one")
    # vLLM hands each block of a request to one group once: a repeat would share one page.
    first: dict[int, int] = {}
    for group, blocks in enumerate(lists):
        for block in blocks:
            if block in first:
                again = "twice in group" if first[block] == group else f"in groups {first[block]} and"
                raise UserError(f"--{side}-blocks: block {block} is {again} {group}; a request holds each "
                                f"block once (give each of the {n_groups} groups its own blocks, "
                                f"separated by ';')")
            first[block] = group
    return tuple(lists)


@dataclass(frozen=True)
class DescriptorRead:
    d_rank: int
    p_rank: int
    local_list: str                 # "base" | "split:<i>"
    local: DescriptorList
    remote: DescriptorList
    local_ids: array[int] = field(compare=False)
    remote_ids: array[int] = field(compare=False)
    attention: bool = False
    group_counts: tuple[int, ...] = field(default=(), compare=False)   # IDs of each KV-cache group

    def to_dict(self) -> dict[str, Any]:
        return {"d_rank": self.d_rank, "p_rank": self.p_rank, "local_list": self.local_list,
                "ssm_regions_per_layer": self.local.k,
                "local_ids": self.local_ids.tolist(), "remote_ids": self.remote_ids.tolist()}


@dataclass(frozen=True)
class DescriptorMap:
    groups: tuple[str, ...]
    prefill: ListShape
    decode: ListShape
    request: Request
    reads: tuple[DescriptorRead, ...]
    group_tensors: tuple[int, ...] = ()     # tensors each group's IDs cover (the release decides)
    # the regions each attention-kind group's IDs cover, where the list numbers regions
    # (ListShape.regions: GLM-5-Next), None for an SSM group; empty elsewhere
    group_streams: tuple[tuple[int, ...] | None, ...] = ()

    def tensors_of(self, group: int) -> int:
        if self.group_tensors:
            return self.group_tensors[group]
        return self.decode.tensors if self.groups[group] == ATTENTION else self.decode.ssm_tensors

    def streams_of(self, group: int) -> int:
        """How many streams (regions) an attention-kind group's IDs cover."""
        chosen = self.group_streams[group] if self.group_streams else None
        if chosen is not None:
            return len(chosen)
        return self.tensors_of(group) * self.decode.streams_per_tensor

    def to_dict(self, d_rank: int | None = None) -> dict[str, Any]:
        return {"groups": list(self.groups), "group_tensors": [self.tensors_of(g) for g in range(len(self.groups))],
                **({"group_regions": [list(s) if s is not None else None for s in self.group_streams]}
                   if self.group_streams else {}),
                "prefill": self.prefill.to_dict(),
                "decode": self.decode.to_dict(), "request": self.request.to_dict(),
                "reads": [r.to_dict() for r in self.reads if d_rank is None or r.d_rank == d_rank]}
