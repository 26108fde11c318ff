"""A sparse-attention indexer's two caches beside each indexed-attention layer as vLLM's NIXL connector
moves them: the ring (SPLIT) and the compressed keys (REPLICATE; docs/reference.md, 6d and 6e)."""

from __future__ import annotations

from mambaxfer_cli.engines.vllm import families
from mambaxfer_cli.engines.vllm.circular_buffer import IndexerCaches
from mambaxfer_cli.engines.vllm.engine import EngineLayout
from mambaxfer_cli.engines.vllm.handshake import attention_sources
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.planning.reads import Read, Segment

# The caches' regions: the ring and the compressed keys. A read of one is a ``Read`` of one
# ``Segment``: bytes from an offset of P's page (past its end: the bytes after it in P's block
# row) to an offset of D's.
RING, CKEY = "ring", "ckey"


def caches(model: ModelSpec) -> IndexerCaches | None:
    """The model's indexer caches, None where it keeps none."""
    return families.first("indexer_caches", model)


def _read(d_rank: int, p_rank: int, region: str, remote: int, local: int, size: int) -> Read:
    return Read(d_rank, p_rank, (Segment(region, remote, local, size),))


def head_offset(d_rank: int, d_tp: int, p_tp: int, kv_heads: int) -> int:
    """``compute_head_offset``: where D rank ``d_rank``'s heads start in its source P rank's
    block, in D's head slices."""
    if d_tp <= p_tp:
        return 0
    if d_tp > kv_heads:
        p_rank = d_rank * p_tp // d_tp
        return d_rank * kv_heads // d_tp - p_rank * kv_heads // p_tp
    return d_rank % (d_tp // p_tp)


def ring_reads(model: ModelSpec, prefill: EngineLayout, decode: EngineLayout, d_rank: int,
               exact: bool) -> tuple[Read, ...]:
    """D rank ``d_rank``'s reads of a ring page: vLLM reads the SPLIT region as head-sharded though
    every rank holds the whole page (``_build_fa_remote``); ``exact``: the whole page from the first source."""
    found = caches(model)
    assert found is not None
    page = found.ring_page_bytes
    sources = attention_sources(prefill, decode, d_rank)
    if exact:
        return (_read(d_rank, sources[0], RING, 0, 0, page),)
    if len(sources) > 1:
        part = page // len(sources)
        return tuple(_read(d_rank, s, RING, 0, i * part, part) for i, s in enumerate(sources))
    offset = 0 if found.mla else head_offset(d_rank, decode.tp, prefill.tp, model.num_kv_heads or 0)
    return (_read(d_rank, sources[0], RING, offset * page, 0, page),)


def key_reads(model: ModelSpec, prefill: EngineLayout, decode: EngineLayout, d_rank: int,
              exact: bool) -> tuple[Read, ...]:
    """D rank ``d_rank``'s reads of a compressed-key page: whole from every attention source (a
    REPLICATE region), or from the first under ``exact``."""
    found = caches(model)
    assert found is not None
    page = found.key_page_bytes(decode.geometry.block_size)
    sources = attention_sources(prefill, decode, d_rank)
    return tuple(_read(d_rank, s, CKEY, 0, 0, page) for s in (sources[:1] if exact else sources))
