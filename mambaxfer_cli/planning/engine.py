"""One engine (the P side or the D side) as vLLM 0.33 builds it, computed once.

Its ranks' SSM layouts, the attention KV heads each rank holds, its block geometry and its
KV-cache tensors: reads, descriptor lists, the simulator and execute all consume this value.
"""

from __future__ import annotations

from dataclasses import dataclass

from mambaxfer_cli.planning.descriptors import Engine, make_engine
from mambaxfer_cli.planning.geometry import GDN_CHECKPOINT_ALIGNMENT, EngineFlags, Geometry, attention_bytes_per_token, derive
from mambaxfer_cli.planning.geometry import kv_cache_dtype as resolve_kv_dtype
from mambaxfer_cli.planning.kv_groups import KVGrouping
from mambaxfer_cli.planning.layout import RankLayout, Shard, engine_layouts, kv_head_shard
from mambaxfer_cli.planning.model import ModelSpec, Variant


@dataclass(frozen=True)
class Side:
    """One engine: TP size, every rank's layout and KV heads, geometry and descriptor lists."""

    tp: int
    ranks: tuple[RankLayout, ...]
    kv_heads: tuple[Shard | None, ...]     # per rank; None without attention
    geometry: Geometry
    lists: Engine                          # what its prepared descriptor lists hold
    kv_dtype: str | None = None            # element type of the attention cache
    head_size: int | None = None
    hashed_backend: str = ""               # the backend name vLLM's compatibility hash takes

    @property
    def page_bytes(self) -> int:
        return self.geometry.page_bytes

    @property
    def kernel_block_bytes(self) -> int:
        return self.geometry.kernel_block_bytes

    @property
    def kernel_tokens(self) -> int:
        return self.geometry.kernel_block_size

    @property
    def head_token_bytes(self) -> int:
        """K and V of one token of one KV head."""
        return 2 * (self.head_size or 0) * _dtype_bytes(self.kv_dtype)

    @property
    def has_attention(self) -> bool:
        return self.geometry.attention_bytes_per_token is not None

    def to_dict(self, only: int | None = None) -> dict:
        return {"tp": self.tp, "ranks": [r.to_dict() for r in self.ranks if only is None or r.rank == only]}


def _dtype_bytes(name: str | None) -> int:
    from mambaxfer_cli.planning.dtypes import dtype_bytes

    return dtype_bytes(name) if name else 0


def checkpoint_alignment(model: ModelSpec) -> int:
    """Token alignment vLLM 0.33 gives blocks for prefix caching: GDN layers' prefill checkpoints."""
    return GDN_CHECKPOINT_ALIGNMENT if model.variant is Variant.GDN else 1


def build_side(model: ModelSpec, tp: int, flags: EngineFlags, grouping: KVGrouping,
               attention_streams: int = 1) -> Side:
    """Lay out one engine of ``tp`` ranks with ``flags`` (vLLM's serve flags for this side)."""
    ranks = engine_layouts(model, tp)
    heads = tuple(kv_head_shard(model, tp, r) for r in range(tp))
    a1 = kv_dtype = None
    if model.has_attention:
        kv_dtype = resolve_kv_dtype(flags.kv_cache_dtype, model.model_dtype)
        a1 = attention_bytes_per_token(len(heads[0]), model.head_size, kv_dtype)
    geometry = derive(ranks[0].state_bytes, a1, flags, checkpoint_alignment(model))
    lists = make_engine(grouping, geometry.num_blocks, geometry.blocks_per_logical, attention_streams,
                        len(ranks[0].regions))
    return Side(tp, ranks, heads, geometry, lists, kv_dtype, model.head_size, hashed_backend(model, geometry))


# The backend of an SSM layer, as vLLM 0.33 names it.
SSM_BACKENDS = {Variant.MAMBA1: "MAMBA1_ATTN", Variant.MAMBA2: "MAMBA2_ATTN", Variant.GDN: "GDN_ATTN"}


def hashed_backend(model: ModelSpec, geometry: Geometry) -> str:
    """vLLM's compatibility hash takes the backend of the first layer that keeps a cache
    (``get_current_attn_backends(...)[0]``; SSM layers are attention layers there too): for a
    hybrid that starts with an SSM layer, the attention backend is not part of the hash."""
    if model.layers and model.layers[0] == "attention":
        return geometry.attention_backend
    return SSM_BACKENDS[model.variant]
