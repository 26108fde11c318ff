"""From a plan's reads to NIXL descriptor lists and descriptor IDs (SPEC section 4), vectorised.

A prepared list is ``[attention | SSM]``: ``F·N`` attention descriptors (one per stream and
kernel block), then for each SSM tensor, each of its ``k`` regions, one descriptor per logical
block. IDs: attention ``f·N + b``; SSM ``F·N + q·L + b`` with ``q = tensor·k + region``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.kv_groups import KVGrouping
from mambaxfer_cli.model import ATTENTION

# Attention bytes are not modelled: check and execute give each attention kernel block this
# many bytes per KV head so that the attention descriptors point at real, checkable memory.
ATTENTION_HEAD_BYTES = 64


@dataclass(frozen=True)
class Engine:
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

    def ssm_descs(self, k: int | None = None) -> int:
        return self.ssm_tensors * (self.ssm_regions if k is None else k) * self.logical_blocks

    def to_dict(self) -> dict:
        return {"tensors": self.tensors, "ssm_tensors": self.ssm_tensors,
                "attention_streams": self.attention_streams, "num_blocks": self.num_blocks,
                "blocks_per_logical": self.blocks_per_logical,
                "attention_descs": self.attention_descs, "ssm_descs": self.ssm_descs()}


def make_engine(grouping: KVGrouping, num_blocks: int, blocks_per_logical: int,
                streams_per_tensor: int, ssm_regions: int) -> Engine:
    if streams_per_tensor not in (1, 2):
        raise UserError("--attention-streams must be 1 (vLLM 0.33) or 2 (split K and V)")
    return Engine(grouping.tensors, grouping.ssm_tensors, grouping.tensors * streams_per_tensor,
                  num_blocks, blocks_per_logical, ssm_regions)


@dataclass(frozen=True)
class DescriptorList:
    """One prepared list: where each descriptor points, relative to its block."""

    engine: Engine
    regions: tuple[tuple[int, int], ...]   # SSM (offset, size) in a page, k of them
    attention: tuple[int, int]             # (offset, size) in an attention kernel block slot

    @property
    def k(self) -> int:
        return len(self.regions)

    @property
    def length(self) -> int:
        return self.engine.attention_descs + self.engine.ssm_descs(self.k)

    def resolve(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Vectorised: what each ID points at. ``attention`` rows use stream/block of the attention
        slots, the others tensor/logical block of the SSM pages."""
        ids = np.asarray(ids, dtype=np.int64)
        eng = self.engine
        is_attn = ids < eng.attention_descs
        ssm = np.where(is_attn, 0, ids - eng.attention_descs)
        q, block = np.divmod(ssm, eng.logical_blocks)
        tensor, region = np.divmod(q, max(self.k, 1))
        attn_stream, attn_block = np.divmod(np.where(is_attn, ids, 0), eng.num_blocks)
        offsets = np.array([o for o, _ in self.regions] or [0], dtype=np.int64)
        sizes = np.array([s for _, s in self.regions] or [0], dtype=np.int64)
        return {
            "attention": is_attn,
            "tensor": np.where(is_attn, attn_stream, tensor),
            "block": np.where(is_attn, attn_block, block),
            "region": np.where(is_attn, -1, region),
            "offset": np.where(is_attn, self.attention[0], offsets[region]),
            "size": np.where(is_attn, self.attention[1], sizes[region]),
        }

    def table(self, ssm_bases: Sequence[int], page_bytes: int, attention_bases: Sequence[int],
              slot_bytes: int, dev_id: int = 0) -> np.ndarray:
        """The whole list as an ``(length, 3)`` uint64 array of (address, length, device)."""
        eng = self.engine
        attn_addr = (np.asarray(attention_bases, dtype=np.uint64)[:, None]
                     + np.arange(eng.num_blocks, dtype=np.uint64)[None, :] * np.uint64(slot_bytes)
                     + np.uint64(self.attention[0])).ravel()
        offsets = np.array([o for o, _ in self.regions], dtype=np.uint64)
        sizes = np.array([s for _, s in self.regions], dtype=np.uint64)
        ssm_addr = (np.asarray(ssm_bases, dtype=np.uint64)[:, None, None]
                    + offsets[None, :, None]
                    + np.arange(eng.logical_blocks, dtype=np.uint64)[None, None, :] * np.uint64(page_bytes)
                    ).ravel()
        ssm_len = np.broadcast_to(sizes[None, :, None], (eng.ssm_tensors, self.k, eng.logical_blocks)).ravel()
        out = np.empty((self.length, 3), dtype=np.uint64)
        out[:eng.attention_descs, 0] = attn_addr
        out[:eng.attention_descs, 1] = self.attention[1]
        out[eng.attention_descs:, 0] = ssm_addr
        out[eng.attention_descs:, 1] = ssm_len
        out[:, 2] = dev_id
        return out


def block_ids(dlist: DescriptorList, groups: Sequence[str], blocks: Sequence[np.ndarray],
              with_attention: bool) -> np.ndarray:
    """The IDs of one read for a request: per group, region-major; groups concatenated."""
    eng = dlist.engine
    parts = []
    for kind, logical in zip(groups, blocks):
        logical = np.asarray(logical, dtype=np.int64)
        if kind == ATTENTION:
            if not with_attention:
                continue
            kernel = (logical[:, None] * eng.blocks_per_logical
                      + np.arange(eng.blocks_per_logical, dtype=np.int64)[None, :]).ravel()
            streams = np.arange(eng.attention_streams, dtype=np.int64)[:, None] * eng.num_blocks
            parts.append((streams + kernel[None, :]).ravel())
        else:
            q = np.arange(eng.ssm_tensors * dlist.k, dtype=np.int64)[:, None]
            parts.append((eng.attention_descs + q * eng.logical_blocks + logical[None, :]).ravel())
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Request:
    """Logical block IDs of one request, one array per KV-cache group, on each side."""

    prefill_blocks: tuple[np.ndarray, ...]
    decode_blocks: tuple[np.ndarray, ...]

    def to_dict(self) -> dict:
        return {"prefill_blocks": [b.tolist() for b in self.prefill_blocks],
                "decode_blocks": [b.tolist() for b in self.decode_blocks]}


def random_request(n_groups: int, per_group: int, prefill: Engine, decode: Engine, seed: int) -> Request:
    """Distinct, non-contiguous logical blocks on each side (seeded), as a busy engine hands out."""
    if per_group < 1:
        raise UserError("--request-blocks must be >= 1")
    rng = np.random.default_rng(seed)
    sides = []
    for engine in (prefill, decode):
        need = n_groups * per_group
        if need > engine.logical_blocks:
            raise UserError(f"a request of {per_group} blocks per group x {n_groups} groups needs "
                            f"{need} logical blocks, but the engine has {engine.logical_blocks}")
        chosen = rng.choice(engine.logical_blocks, size=need, replace=False).astype(np.int64)
        sides.append(tuple(chosen.reshape(n_groups, per_group)))
    return Request(*sides)


def parse_blocks(text: str, n_groups: int, engine: Engine, side: str) -> tuple[np.ndarray, ...]:
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

    def to_dict(self) -> dict:
        return {"d_rank": self.d_rank, "p_rank": self.p_rank, "local_list": self.local_list,
                "ssm_regions_per_layer": self.local.k,
                "local_ids": self.local_ids.tolist(), "remote_ids": self.remote_ids.tolist()}


@dataclass(frozen=True)
class DescriptorMap:
    groups: tuple[str, ...]
    prefill: Engine
    decode: Engine
    request: Request
    reads: tuple[DescriptorRead, ...]

    def to_dict(self, d_rank: int | None = None) -> dict:
        return {"groups": list(self.groups), "prefill": self.prefill.to_dict(),
                "decode": self.decode.to_dict(), "request": self.request.to_dict(),
                "reads": [r.to_dict() for r in self.reads if d_rank is None or r.d_rank == d_rank]}
