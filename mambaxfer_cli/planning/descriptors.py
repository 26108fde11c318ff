"""From a plan's reads to NIXL descriptor lists and descriptor IDs (docs/reference.md §4), vectorised.

A prepared list is ``[attention | SSM]``: ``F·N·n`` attention descriptors (per stream, per kernel
block, its ``n`` pieces: one in vLLM's own lists, ``block_size_ratio`` sub-blocks when D's kernel
block holds several of P's, token chunks in mambaxfer's exact lists across different block
sizes), then for each SSM tensor, each of its ``k`` regions, one descriptor per logical block.
IDs: attention ``f·N·n + b·n + j``; SSM ``F·N·n + q·L + b`` with ``q = tensor·k + region``. Which
tensors a group's IDs cover is the release's rule: every one of its kind in vLLM 0.33, only those
holding one of its layers in 0.34 (a short last group posts fewer).

Memory is vLLM's: one registered region per KV-cache tensor of ``L`` pages; an SSM layer's
logical block ``b`` is the page at ``b·page``, an attention layer's kernel block ``k`` the
``page/blocks_per_logical`` bytes at ``k·page/blocks_per_logical`` (split in ``F/R`` equal parts
when K and V are separate streams).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.planning.kv_groups import KVGrouping
from mambaxfer_cli.planning.model import ATTENTION

@dataclass(frozen=True)
class ListShape:
    tensors: int
    ssm_tensors: int
    attention_streams: int
    num_blocks: int
    blocks_per_logical: int
    ssm_regions: int            # k of the engine's base list

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
    def attention_descs(self) -> int:
        return self.attention_streams * self.num_blocks

    @property
    def streams_per_tensor(self) -> int:
        return self.attention_streams // self.tensors

    def ssm_descs(self, k: int | None = None) -> int:
        return self.ssm_tensors * (self.ssm_regions if k is None else k) * self.logical_blocks

    def to_dict(self) -> dict[str, Any]:
        return {"tensors": self.tensors, "ssm_tensors": self.ssm_tensors,
                "attention_streams": self.attention_streams, "num_blocks": self.num_blocks,
                "blocks_per_logical": self.blocks_per_logical,
                "attention_descs": self.attention_descs, "ssm_descs": self.ssm_descs()}


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

    def resolve(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Vectorised: what each ID points at. ``attention`` rows give stream, kernel block and
        piece; the others SSM tensor, region and logical block."""
        ids = np.asarray(ids, dtype=np.int64)
        eng = self.engine
        is_attn = ids < self.attention_descs
        ssm = np.where(is_attn, 0, ids - self.attention_descs)
        q, block = np.divmod(ssm, eng.logical_blocks)
        tensor, region = np.divmod(q, max(self.k, 1))
        attn = np.where(is_attn, ids, 0)
        stream, rest = np.divmod(attn, eng.num_blocks * self.pieces)
        attn_block, piece = np.divmod(rest, self.pieces)
        offsets = np.array([o for o, _ in self.regions] or [0], dtype=np.int64)
        sizes = np.array([s for _, s in self.regions] or [0], dtype=np.int64)
        a_off = np.array([o for o, _ in self.attention], dtype=np.int64)
        a_size = np.array([s for _, s in self.attention], dtype=np.int64)
        region = np.clip(region, 0, max(self.k - 1, 0))
        return {
            "attention": is_attn,
            "tensor": np.where(is_attn, stream, tensor),
            "block": np.where(is_attn, attn_block, block),
            "region": np.where(is_attn, -1, region),
            "piece": np.where(is_attn, piece, -1),
            "offset": np.where(is_attn, a_off[piece], offsets[region]),
            "size": np.where(is_attn, a_size[piece], sizes[region]),
        }

    def addresses(self, ids: np.ndarray, page_bytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(KV-cache tensor, byte offset in it, size) of each ID, in vLLM's shared memory."""
        r = self.resolve(ids)
        eng = self.engine
        kernel = page_bytes // eng.blocks_per_logical
        spt = eng.streams_per_tensor
        tensor = np.where(r["attention"], r["tensor"] // spt, r["tensor"])
        attn = r["block"] * kernel + (r["tensor"] % spt) * (kernel // spt) + r["offset"]
        ssm = r["block"] * page_bytes + r["offset"]
        return tensor, np.where(r["attention"], attn, ssm), r["size"]

    def table(self, bases: Sequence[int], page_bytes: int, dev_id: int = 0) -> np.ndarray:
        """The whole list as an ``(length, 3)`` uint64 array of (address, length, device)."""
        eng = self.engine
        kernel = page_bytes // eng.blocks_per_logical
        spt = eng.streams_per_tensor
        base = np.asarray(bases, dtype=np.uint64)
        streams = np.arange(eng.attention_streams, dtype=np.uint64)
        stream_base = base[streams // np.uint64(spt)] + (streams % np.uint64(spt)) * np.uint64(kernel // spt)
        a_off = np.array([o for o, _ in self.attention], dtype=np.uint64)
        a_size = np.array([s for _, s in self.attention], dtype=np.uint64)
        attn_addr = (stream_base[:, None, None]
                     + np.arange(eng.num_blocks, dtype=np.uint64)[None, :, None] * np.uint64(kernel)
                     + a_off[None, None, :]).ravel()
        offsets = np.array([o for o, _ in self.regions], dtype=np.uint64)
        sizes = np.array([s for _, s in self.regions], dtype=np.uint64)
        ssm_addr = (base[:eng.ssm_tensors, None, None]
                    + offsets[None, :, None]
                    + np.arange(eng.logical_blocks, dtype=np.uint64)[None, None, :] * np.uint64(page_bytes)
                    ).ravel()
        ssm_len = np.broadcast_to(sizes[None, :, None], (eng.ssm_tensors, self.k, eng.logical_blocks)).ravel()
        out = np.empty((self.length, 3), dtype=np.uint64)
        n_attn = self.attention_descs
        out[:n_attn, 0] = attn_addr
        out[:n_attn, 1] = np.broadcast_to(a_size[None, None, :], (eng.attention_streams, eng.num_blocks,
                                                                  self.pieces)).ravel()
        out[n_attn:, 0] = ssm_addr
        out[n_attn:, 1] = ssm_len
        out[:, 2] = dev_id
        return out


def strided(dlist: DescriptorList, bases: Sequence[int], page_bytes: int, dev_id: int = 0) -> np.ndarray | None:
    """The list in NIXL 1.5's ``(rows, 5)`` form (address, length, device, stride, count): one row per
    attention stream and per SSM tensor region, each standing for its blocks ``stride`` bytes apart,
    numbered as ``table`` numbers them. None where the form does not fit (several pieces per kernel
    block, whose IDs run piece-minor)."""
    if dlist.pieces != 1:
        return None
    eng = dlist.engine
    kernel = page_bytes // eng.blocks_per_logical
    spt = eng.streams_per_tensor
    base = np.asarray(bases, dtype=np.uint64)
    streams = np.arange(eng.attention_streams, dtype=np.uint64)
    attn = np.empty((eng.attention_streams, 5), dtype=np.uint64)
    attn[:, 0] = base[streams // np.uint64(spt)] + (streams % np.uint64(spt)) * np.uint64(kernel // spt) \
        + np.uint64(dlist.attention[0][0])
    attn[:, 1], attn[:, 3], attn[:, 4] = dlist.attention[0][1], kernel, eng.num_blocks
    offsets = np.array([o for o, _ in dlist.regions], dtype=np.uint64)
    sizes = np.array([z for _, z in dlist.regions], dtype=np.uint64)
    ssm = np.empty((eng.ssm_tensors, dlist.k, 5), dtype=np.uint64)
    ssm[..., 0] = base[:eng.ssm_tensors, None] + offsets[None, :]
    ssm[..., 1] = sizes[None, :]
    ssm[..., 3], ssm[..., 4] = page_bytes, eng.logical_blocks
    out = np.concatenate([attn, ssm.reshape(-1, 5)])
    out[:, 2] = dev_id
    return out[out[:, 4] > 0]


def nixl_rows(dlist: DescriptorList, bases: Sequence[int], page_bytes: int, dev_id: int = 0) -> np.ndarray:
    """What ``prep_xfer_dlist`` gets: the strided form where it fits (fewer rows), else the table."""
    rows = strided(dlist, bases, page_bytes, dev_id)
    return rows if rows is not None else dlist.table(bases, page_bytes, dev_id)


def expand(rows: np.ndarray) -> np.ndarray:
    """An ``(N, 5)`` strided list as the ``(M, 3)`` list it stands for."""
    counts = rows[:, 4].astype(np.int64)
    index = np.repeat(np.arange(rows.shape[0]), counts)
    step = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    out = np.empty((index.size, 3), dtype=np.uint64)
    out[:, 0] = rows[index, 0] + step.astype(np.uint64) * rows[index, 3]
    out[:, 1], out[:, 2] = rows[index, 1], rows[index, 2]
    return out


def block_ids(dlist: DescriptorList, groups: Sequence[str], blocks: Sequence[np.ndarray],
              attention_slots: Sequence[np.ndarray | None] | None = None,
              group_tensors: Sequence[int] | None = None) -> np.ndarray:
    """The IDs of one read for a request: per group, region-major (stream-major for attention);
    groups concatenated. ``attention_slots[g]`` gives, for an attention group, the slots
    (``kernel block · pieces + piece``) this read pairs, or None for a read without attention;
    ``group_tensors[g]`` how many of its kind's tensors group ``g``'s IDs cover (the first ones;
    default: all)."""
    eng = dlist.engine
    parts = []
    for index, (kind, logical) in enumerate(zip(groups, blocks)):
        if kind == ATTENTION:
            slots = attention_slots[index] if attention_slots is not None else None
            if slots is None:
                continue
            tensors = eng.tensors if group_tensors is None else group_tensors[index]
            streams = np.arange(tensors * eng.streams_per_tensor, dtype=np.int64)[:, None]
            streams = streams * (eng.num_blocks * dlist.pieces)
            parts.append((streams + np.asarray(slots, dtype=np.int64)[None, :]).ravel())
        else:
            tensors = eng.ssm_tensors if group_tensors is None else group_tensors[index]
            logical = np.asarray(logical, dtype=np.int64)
            q = np.arange(tensors * dlist.k, dtype=np.int64)[:, None]
            parts.append((dlist.attention_descs + q * eng.logical_blocks + logical[None, :]).ravel())
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def kernel_blocks(logical: np.ndarray, blocks_per_logical: int) -> np.ndarray:
    """Attention logical blocks expanded into kernel blocks with one engine's own ratio."""
    logical = np.asarray(logical, dtype=np.int64)
    return (logical[:, None] * blocks_per_logical + np.arange(blocks_per_logical, dtype=np.int64)[None, :]).ravel()


@dataclass(frozen=True)
class Request:
    """Logical block IDs of one request, one array per KV-cache group, on each side."""

    prefill_blocks: tuple[np.ndarray, ...]
    decode_blocks: tuple[np.ndarray, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"prefill_blocks": [b.tolist() for b in self.prefill_blocks],
                "decode_blocks": [b.tolist() for b in self.decode_blocks]}


def random_request(prefill_counts: Sequence[int], decode_counts: Sequence[int], prefill: ListShape,
                   decode: ListShape, seed: int) -> Request:
    """Distinct, non-contiguous logical blocks on each side (seeded), as a busy engine hands out:
    ``counts[g]`` blocks for group ``g`` (attention groups cover the same tokens on both sides, so
    their counts differ where the two engines' blocks do)."""
    rng = random.Random(seed)
    sides = []
    for engine, counts in ((prefill, prefill_counts), (decode, decode_counts)):
        need = int(sum(counts))
        if need > engine.logical_blocks:
            raise UserError(f"a request of {need} logical blocks ({', '.join(map(str, counts))} per KV-cache "
                            f"group) does not fit an engine of {engine.logical_blocks} logical blocks")
        chosen = np.array(rng.sample(range(engine.logical_blocks), need), dtype=np.int64)
        sides.append(tuple(np.split(chosen, np.cumsum(counts)[:-1])))
    return Request(*sides)


def parse_blocks(text: str, n_groups: int, engine: ListShape, side: str) -> tuple[np.ndarray, ...]:
    """``'3,5;1;2'``: block IDs per group, groups separated by ';' (each block once in the request)."""
    try:
        lists = [np.array([int(x) for x in part.split(",") if x.strip()], dtype=np.int64)
                 for part in text.split(";")]
    except (ValueError, OverflowError):   # OverflowError: beyond int64, no block ID
        shown = text if len(text) <= 60 else f"{text[:57]}..."
        raise UserError(f"--{side}-blocks: '{shown}' is not a list of integers like '3,5;1;2'") from None
    if len(lists) == 1:
        lists = lists * n_groups
    if len(lists) != n_groups:
        raise UserError(f"--{side}-blocks gives {len(lists)} groups, the model has {n_groups} KV-cache groups")
    for blocks in lists:
        bad = blocks[(blocks < 0) | (blocks >= engine.logical_blocks)]
        if bad.size:
            raise UserError(f"--{side}-blocks: block {int(bad[0])} is outside the {side} engine's "
                            f"{engine.logical_blocks} logical blocks")
    empty = next((group for group, blocks in enumerate(lists) if not blocks.size), None)
    if empty is not None:
        raise UserError(f"--{side}-blocks: group {empty} has no block; a request gives each group at least one")
    # vLLM hands each block of a request to one group once: a repeat would share one page.
    first: dict[int, int] = {}
    for group, blocks in enumerate(lists):
        for block in blocks.tolist():
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
    local_ids: np.ndarray = field(compare=False)
    remote_ids: np.ndarray = field(compare=False)
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

    def tensors_of(self, group: int) -> int:
        if self.group_tensors:
            return self.group_tensors[group]
        return self.decode.tensors if self.groups[group] == ATTENTION else self.decode.ssm_tensors

    def to_dict(self, d_rank: int | None = None) -> dict[str, Any]:
        return {"groups": list(self.groups), "group_tensors": [self.tensors_of(g) for g in range(len(self.groups))],
                "prefill": self.prefill.to_dict(),
                "decode": self.decode.to_dict(), "request": self.request.to_dict(),
                "reads": [r.to_dict() for r in self.reads if d_rank is None or r.d_rank == d_rank]}
