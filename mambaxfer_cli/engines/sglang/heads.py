"""SGLang's attention head slices across TP sizes (disaggregation/common/staging_buffer.py
``compute_head_slice_params``): which KV heads a prefill rank writes into a decode rank's page."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HeadSlice:
    """Heads ``[src_start, src_start + count)`` of the prefill rank's page into heads
    ``[dst_start, dst_start + count)`` of the decode rank's, in the ranks' local head numbers."""

    src_start: int
    count: int
    dst_start: int

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.src_start, self.count, self.dst_start, self.count)


def head_slice(*, src_tp: int, dst_tp: int, src_rank: int, dst_rank: int, kv_heads: int) -> HeadSlice:
    """``compute_head_slice_params``: the heads prefill rank ``src_rank`` writes into decode rank
    ``dst_rank``'s page, each side holding ``max(1, heads // tp)`` heads (GQA replication)."""
    src_per, dst_per = max(1, kv_heads // src_tp), max(1, kv_heads // dst_tp)
    src_rank, dst_rank = src_rank % src_tp, dst_rank % dst_tp
    if src_tp > dst_tp:
        head = src_rank // max(1, src_tp // kv_heads)
        return HeadSlice(0, src_per, (head * src_per) % dst_per)
    head = dst_rank // max(1, dst_tp // kv_heads)
    return HeadSlice((head * dst_per) % src_per, dst_per, 0)
