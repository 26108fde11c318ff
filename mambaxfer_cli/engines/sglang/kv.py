"""The attention KV of a hybrid as SGLang keeps and moves it: ``MHATokenToKVPool``'s K and V pages,
MLA's latents and DSA's index keys, and the writes of ``send_kvcache`` and ``send_kvcache_slice``,
against the exact ones from the heads each rank holds (docs/reference.md 9.6)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mambaxfer_cli.engines.sglang.entries import TransferEntry
from mambaxfer_cli.engines.sglang import families
from mambaxfer_cli.engines.sglang.heads import HeadSlice
from mambaxfer_cli.engines.sglang.ranks import writers
from mambaxfer_cli.engines.sglang.writes import StateWrite
from mambaxfer_cli.planning.dtypes import dtype_bytes
from mambaxfer_cli.planning.layout import kv_head_shard
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.proof.pattern import unit_bytes_pattern

K, V, LATENT, INDEX_K = "k", "v", "kv", "index_k"
KV_FIELDS = (K, V)
KV_BUFFERS = (K, V, LATENT, INDEX_K)      # every KV entry's field, MLA's latent and DSA's index keys too
QUANT_BLOCK = 128                         # DSATokenToKVPool.quant_block_size: one float32 scale per block


def forced_page_size(model: ModelSpec) -> int | None:
    """The page SGLang sets for the model whatever --page-size says (its family's ``PAGE_SIZES``: a DSA
    model's, a compressed QSA model's), else None."""
    hook = families.merged("PAGE_SIZES").get(model.family)
    return hook(model) if hook else None


def dsa_page_size(model: ModelSpec) -> int | None:
    """The page SGLang sets for a DSA model whatever --page-size says."""
    return forced_page_size(model) if model.kpool_indexer else None


def buffers(model: ModelSpec) -> tuple[str, ...]:
    return (LATENT, INDEX_K) if model.kpool_indexer else (LATENT,) if model.mla else (K, V)


@dataclass(frozen=True)
class KVSide:
    """One side's attention KV at one TP size: the model (in SGLang's dtypes), and the page size."""

    model: ModelSpec
    tp: int
    page_size: int

    @property
    def head_bytes(self) -> int:
        assert self.model.head_size is not None
        return self.model.head_size * dtype_bytes(self.model.model_dtype)

    @property
    def heads(self) -> int:
        """KV heads per rank: SGLang's ``max(1, heads // tp)``."""
        assert self.model.num_kv_heads is not None
        return max(1, self.model.num_kv_heads // self.tp)

    @property
    def token_bytes(self) -> int:
        return self.heads * self.head_bytes

    @property
    def page_bytes(self) -> int:
        return self.page_size * self.token_bytes

    @property
    def index_bytes(self) -> int:
        """One page of a layer's index keys (0 without DSA's indexer)."""
        x = self.model.kpool_indexer
        return self.page_size // x.index_kpool * (x.index_head_dim + x.index_head_dim // QUANT_BLOCK * 4) if x else 0

    def item_bytes(self, field: str) -> int:
        return self.index_bytes if field == INDEX_K else self.page_bytes

    def first_head(self, rank: int) -> int:
        shard = kv_head_shard(self.model, self.tp, rank)
        assert shard is not None and len(shard) == self.heads, (shard, self.heads)
        return shard.start

    def rank(self, rank: int) -> KVRank:
        assert self.model.num_kv_heads is not None
        return KVRank(self.page_size, self.heads, self.head_bytes, self.first_head(rank), self.model.num_kv_heads,
                      self.index_bytes)


@dataclass(frozen=True)
class KVRank:
    """One rank's KV page, plainly (what a rank process is handed): ``heads`` heads from global
    head ``first_head`` on, of ``total_heads``, for each of ``page_size`` tokens."""

    page_size: int
    heads: int
    head_bytes: int
    first_head: int
    total_heads: int
    index_bytes: int = 0

    def page(self, field: str, block: int, layer: int) -> np.ndarray:
        """What one page of one buffer holds: each token's heads, each head the pattern of
        (buffer, layer, block, token · total heads + global head); index keys: one pattern."""
        if field == INDEX_K:
            return unit_bytes_pattern(layer, block, "ckey", 0, 1, self.index_bytes)[0]
        key = 2 * layer + (1 if field == V else 0)
        return np.concatenate([unit_bytes_pattern(key, block, "kv", t * self.total_heads + self.first_head,
                                                  self.heads, self.head_bytes).ravel()
                               for t in range(self.page_size)])

    def holds(self, field: str, offset: int) -> str:
        """What a byte of a page is: its buffer, token, global head and byte."""
        if field == INDEX_K:
            return f"index keys byte {offset}"
        token, rest = divmod(offset, self.heads * self.head_bytes)
        head, byte = divmod(rest, self.head_bytes)
        return f"{field.upper()} token {token} head {self.first_head + head} byte {byte}"


def kv_entries(side: KVSide) -> tuple[TransferEntry, ...]:
    """One entry per buffer in SGLang's order: K of every attention layer, then V of every one (or
    the latent's, then the index keys'); an item is one page (``dim``: the rank's KV heads)."""
    if not side.model.has_attention:
        return ()
    layers = side.model.attention_indices      # numbered among the cache-keeping layers, as the state entries are
    return tuple(TransferEntry(field, layer, side.item_bytes(field), side.heads) for field in buffers(side.model)
                 for layer in layers)


def _per_token(field: str, d: int, p: int, prefill: KVSide, decode: KVSide, src_head: int, dst_head: int,
               count: int) -> list[StateWrite]:
    size = count * prefill.head_bytes
    return [StateWrite(field, d, p, t * prefill.token_bytes + src_head * prefill.head_bytes,
                       t * decode.token_bytes + dst_head * decode.head_bytes, size)
            for t in range(prefill.page_size)]


def sglang_kv_writes(prefill: KVSide, decode: KVSide,
                     slices: Sequence[tuple[int, int, HeadSlice]]) -> tuple[StateWrite, ...]:
    """What SGLang writes into one page of each decode rank's K and V buffers: the page whole at
    equal TP (P rank d into D rank d), else the plan's head slices token by token."""
    if not prefill.model.has_attention:
        return ()
    if prefill.model.mla:
        return tuple(StateWrite(f, d, p, 0, 0, prefill.item_bytes(f)) for f in buffers(prefill.model)
                     for d in range(decode.tp) for p in writers(prefill.tp, decode.tp, d))
    out: list[StateWrite] = []
    for field in KV_FIELDS:
        if prefill.tp == decode.tp:
            out += [StateWrite(field, d, d, 0, 0, prefill.page_bytes) for d in range(decode.tp)]
            continue
        for d, p, s in slices:
            out += _per_token(field, d, p, prefill, decode, s.src_start, s.dst_start, s.count)
    return tuple(out)


def exact_kv_writes(prefill: KVSide, decode: KVSide) -> tuple[StateWrite, ...]:
    """The right heads for each decode rank's page, token by token, each run from the first of its
    writers (SGLang's rank mapping) that holds it."""
    if not prefill.model.has_attention:
        return ()
    out: list[StateWrite] = []
    if prefill.model.kpool_indexer:       # index keys: whole pages, alike on every rank
        out += [StateWrite(INDEX_K, d, writers(prefill.tp, decode.tp, d)[0], 0, 0, prefill.index_bytes)
                for d in range(decode.tp)]
    for field in (f for f in buffers(prefill.model) if f != INDEX_K):
        for d in range(decode.tp):
            mine = range(decode.first_head(d), decode.first_head(d) + decode.heads)
            sources = [*writers(prefill.tp, decode.tp, d), *range(prefill.tp)]
            head = mine.start
            while head < mine.stop:
                p = next(p for p in sources if prefill.first_head(p) <= head < prefill.first_head(p) + prefill.heads)
                count = min(mine.stop, prefill.first_head(p) + prefill.heads) - head
                out += _per_token(field, d, p, prefill, decode, head - prefill.first_head(p),
                                  head - mine.start, count)
                head += count
    return merged(out)


def merged(writes: Sequence[StateWrite]) -> tuple[StateWrite, ...]:
    """Writes joined where one ends where the next begins on both sides (same field and ranks)."""
    out: list[StateWrite] = []
    for w in writes:
        last = out[-1] if out else None
        if (last is not None and (last.field, last.d_rank, last.p_rank) == (w.field, w.d_rank, w.p_rank)
                and last.src + last.length == w.src and last.dst + last.length == w.dst):
            out[-1] = StateWrite(w.field, w.d_rank, w.p_rank, last.src, last.dst, last.length + w.length)
        else:
            out.append(w)
    return tuple(out)
