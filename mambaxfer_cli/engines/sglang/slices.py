"""SGLang's heterogeneous-TP slices of one state item (disaggregation/utils.py): which blocks a
prefill rank writes into a decode rank's slot when their attention TP sizes differ."""

from __future__ import annotations

from dataclasses import dataclass

from mambaxfer_cli.engines.sglang.entries import TransferEntry
from mambaxfer_cli.engines.sglang.release import SGLANG_0_5_23, Release
from mambaxfer_cli.errors import Refused, UserError


@dataclass(frozen=True)
class Block:
    """``(src_start, dst_start, length)``: in units of the sliced axis, or in bytes."""

    src: int
    dst: int
    length: int

    def as_tuple(self) -> tuple[int, int, int]:
        return (self.src, self.dst, self.length)


def replicated_writer(src_tp: int, dst_tp: int, src_rank: int, release: Release = SGLANG_0_5_23) -> bool:
    """``should_send_replicated_state``: scatter broadcasts (every source writes); aggregation
    elects the first source of each group of ``src_tp / dst_tp``."""
    if src_tp <= 0 or dst_tp <= 0:
        raise UserError("SGLang: attention TP sizes must be positive for replicated-state transfer")
    if max(src_tp, dst_tp) % min(src_tp, dst_tp):
        raise Refused("SGLang: " + release.message("replicated_divide", prefill=src_tp, decode=dst_tp))
    if not 0 <= src_rank < src_tp:
        raise UserError(f"SGLang: source attention TP rank {src_rank} is out of range for TP {src_tp}")
    if src_tp <= dst_tp:
        return True
    return src_rank % (src_tp // dst_tp) == 0


def slice_blocks(*, src_dim: int, dst_dim: int, src_tp: int, dst_tp: int, dst_rank: int, src_rank: int,
                 conv_shard_groups: tuple[int, ...] | None = None) -> tuple[Block, ...]:
    """``compute_mamba_state_slice_blocks``, in units of the sliced axis: one block, or one per
    sub-block where they are sharded on their own and add up to the whole unsharded axis."""
    groups = conv_shard_groups if conv_shard_groups and sum(conv_shard_groups) == src_dim * src_tp else None
    subs = [(full // src_tp, full // dst_tp) for full in groups] if groups else [(src_dim, dst_dim)]
    blocks, src_off, dst_off = [], 0, 0
    for src_sub, dst_sub in subs:
        if src_tp > dst_tp:
            blocks.append(Block(src_off, dst_off + src_rank % (src_tp // dst_tp) * src_sub, src_sub))
        else:
            blocks.append(Block(src_off + (dst_rank * dst_sub) % src_sub, dst_off, dst_sub))
        src_off, dst_off = src_off + src_sub, dst_off + dst_sub
    return tuple(blocks)


def byte_blocks(src: TransferEntry, dst: TransferEntry, *, src_tp: int, dst_tp: int, dst_rank: int,
                src_rank: int, release: Release = SGLANG_0_5_23) -> tuple[Block, ...]:
    """``compute_mamba_state_slice_byte_blocks``: the slices in bytes of one slot (one block per conv
    row for Kimi); a replicated item (dim 0) moves whole from the elected writers."""
    if (src.dim == 0) != (dst.dim == 0):
        raise UserError("SGLang: Mamba state replication metadata differs between prefill and decode")
    if src.dim == 0:
        if src.item_len != dst.item_len:
            raise UserError(f"SGLang: Replicated Mamba state item lengths differ between prefill and "
                            f"decode: {src.item_len} != {dst.item_len}")
        if not replicated_writer(src_tp, dst_tp, src_rank, release):
            return ()
        return (Block(0, 0, src.item_len),)
    outer = src.outer_count
    src_unit, dst_unit = src.item_len // (src.dim * outer), dst.item_len // (dst.dim * outer)
    logical = slice_blocks(src_dim=src.dim, dst_dim=dst.dim, src_tp=src_tp, dst_tp=dst_tp, dst_rank=dst_rank,
                           src_rank=src_rank, conv_shard_groups=src.conv_shard_groups)
    return tuple(Block((row * src.dim + b.src) * src_unit, (row * dst.dim + b.dst) * dst_unit, b.length * src_unit)
                 for row in range(outer) for b in logical)
