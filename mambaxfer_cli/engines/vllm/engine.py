"""One engine (the P side or the D side) as its vLLM release builds it on its GPU, computed once.

Its ranks' SSM layouts, the attention KV heads each rank holds, its block geometry and its
KV-cache tensors: reads, descriptor lists, the simulator and execute all consume this value.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from mambaxfer_cli.errors import Refused
from mambaxfer_cli.engines.vllm import families
from mambaxfer_cli.engines.vllm.descriptors import ListShape, list_shape
from mambaxfer_cli.engines.vllm.drafts import page_ratio
from mambaxfer_cli.engines.vllm.geometry import (
    Backend, EngineFlags, Geometry, attention_bytes_per_token, derive, kernel_backend,
)
from mambaxfer_cli.engines.vllm.geometry import kv_cache_dtype as resolve_kv_dtype
from mambaxfer_cli.engines.vllm.gpu import Gpu, gdn_checkpoint_alignment, gdn_prefill_backend
from mambaxfer_cli.planning.dtypes import dtype_bytes
from mambaxfer_cli.engines.vllm.kv_groups import RING, KVGrouping
from mambaxfer_cli.planning.layout import RankLayout, Shard, kv_head_shard
from mambaxfer_cli.engines.vllm.startup import rank_layouts
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.planning.variants import VARIANTS
from mambaxfer_cli.engines.vllm.release import Release, label


# What a registered NIXL region holds where mambaxfer models each (a family's ``regions``): an SSM
# layer's state, an indexer's compressed keys, an attention layer's pages, an indexer's ring.
STATE, KEYS, PAGES = "state", "keys", "pages"


@dataclass(frozen=True)
class Region:
    kind: str                    # STATE | KEYS | PAGES | RING: the first view registered at it
    length: int                  # its block length as register_kv_caches records it
    views: frozenset[str] = frozenset()     # the kinds of every view registered at it

    def holds(self, kinds: tuple[str, ...]) -> bool:
        return bool(self.views & set(kinds))


def registered_regions(views: Sequence[tuple[int, int, str]], keyed_by_length: bool) -> tuple[Region, ...]:
    """``register_kv_caches``'s regions of packed block rows, from each view (offset, length, kind) in its order:
    a view joins the region of its address (and length, ``keyed_by_length``), an MLA view setting its length."""
    seen: list[tuple[int, int] | int] = []
    out: list[Region] = []
    for offset, length, kind in views:
        key = (offset, length) if keyed_by_length else offset
        if key not in seen:
            seen.append(key)
            out.append(Region(kind, length, frozenset((kind,))))
            continue
        at = seen.index(key)
        out[at] = replace(out[at], views=out[at].views | {kind},
                          length=length if kind in (KEYS, PAGES) else out[at].length)
    return tuple(out)


def covered(found: Sequence[Region], ring_group: bool, every_region: bool) -> tuple[int, ...]:
    """The regions an attention-kind transfer group's descriptor IDs cover (``_compute_desc_ids``): the ring
    group's those holding a ring; the attention group's every one (0.33) or those holding keys or pages."""
    if every_region and not ring_group:
        return tuple(range(len(found)))
    kinds = (RING,) if ring_group else (KEYS, PAGES)
    return tuple(i for i, r in enumerate(found) if r.holds(kinds))


@dataclass(frozen=True)
class EngineLayout:
    """One engine: TP size, every rank's layout and KV heads, geometry and descriptor lists."""

    tp: int
    ranks: tuple[RankLayout, ...]
    kv_heads: tuple[Shard | None, ...]     # per rank; None without attention
    geometry: Geometry
    lists: ListShape                          # what its prepared descriptor lists hold
    kv_dtype: str | None = None            # element type of the attention cache
    head_size: int | None = None
    hashed_backend: str = ""               # the backend name vLLM's compatibility hash takes
    flags: EngineFlags = EngineFlags()     # how it was started: release, GPU, serve flags
    kernel: Backend | None = None          # its attention backend's kernel blocks on its GPU
    mla: bool = False                      # MLA: one latent vector per token, every rank whole
    # Block-outermost rows (GLM-5-Next's BLHNC): every layer's page of a block side by side, so a
    # region's block stride is the row, not its page, and vLLM never splits its blocks.
    packed: bool = False
    # every NIXL region as register_kv_caches records it, where mambaxfer models each region
    # (GLM-5-Next's packed rows: glm5next.regions); empty elsewhere
    regions: tuple[Region, ...] = ()

    @property
    def region_block_lens(self) -> tuple[int, ...]:
        return tuple(r.length for r in self.regions)

    @property
    def release(self) -> Release:
        return self.flags.release

    @property
    def gpu(self) -> Gpu:
        return self.flags.gpu

    @property
    def kernel_backend(self) -> Backend:
        """Its attention backend's kernel block sizes on its GPU."""
        return self.kernel or kernel_backend(self.flags.attention_backend, self.gpu, self.head_size,
                                             self.flags.kv_cache_dtype, mla=self.mla)

    def heads(self, rank: int) -> Shard:
        """The KV heads rank ``rank`` holds (an engine with attention)."""
        held = self.kv_heads[rank]
        assert held is not None, "an engine without attention holds no KV heads"
        return held

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
        """K and V of one token of one KV head (MLA: its latent vector)."""
        return (1 if self.mla else 2) * (self.head_size or 0) * _dtype_bytes(self.kv_dtype)

    @property
    def has_attention(self) -> bool:
        return self.geometry.attention_bytes_per_token is not None

    def to_dict(self, only: int | None = None) -> dict[str, Any]:
        return {"tp": self.tp, "ranks": [r.to_dict() for r in self.ranks if only is None or r.rank == only]}


@dataclass(frozen=True)
class Engines:
    """Both engines of a deployment as they are started (each one's release, GPU and serve
    flags): the one value the command line builds from its engine options."""

    prefill: EngineFlags = EngineFlags()
    decode: EngineFlags = EngineFlags()
    kv_cache_layout: str | None = None      # both engines' VLLM_KV_CACHE_LAYOUT (None: vLLM's pick)

    @property
    def releases(self) -> str:
        return label(self.prefill.release, self.decode.release)

    @property
    def release_names(self) -> tuple[str, ...]:
        """Both engines' releases by name (``0.34``), prefill's first."""
        return (self.prefill.release.name, self.decode.release.name)

    def describe(self) -> str:
        """The release(s) and GPU(s) answers are for: ``vLLM 0.34 on H100 (SM 9.0, CUDA 13)``."""
        p, d = self.prefill.gpu, self.decode.gpu
        gpus = p.describe() if p == d else f"{p.describe()} (P) / {d.describe()} (D)"
        return f"{self.releases} on {gpus}"

    def to_dict(self) -> dict[str, Any]:
        """What every document records of the deployment: the release(s) and the GPU(s)."""
        return {"vllm_versions": {"prefill": self.prefill.release.name, "decode": self.decode.release.name},
                "gpu": {"prefill": self.prefill.gpu.spec, "decode": self.decode.gpu.spec}}


def _dtype_bytes(name: str | None) -> int:
    return dtype_bytes(name) if name else 0


def gdn_backend(model: ModelSpec, flags: EngineFlags) -> str | None:
    """The GDN prefill kernel of a GDN model's engine (None for other variants)."""
    if model.variant != GDN:
        return None
    return gdn_prefill_backend(flags.gpu, model.params.get("head_k_dim"), flags.gdn_prefill_backend)


def engine_layout(model: ModelSpec, tp: int, flags: EngineFlags, grouping: KVGrouping,
                  attention_streams: int = 1) -> EngineLayout:
    """Lay out one engine of ``tp`` ranks started with ``flags`` (its release, GPU and serve flags)."""
    flags = families.first("engine_flags", model, flags) or flags    # a family's config hook
    ranks = rank_layouts(model, tp)
    heads = tuple(kv_head_shard(model, tp, r) for r in range(tp))
    a1 = kv_dtype = None
    if model.has_attention and heads[0] is not None and model.head_size is not None:
        kv_dtype = resolve_kv_dtype(flags.kv_cache_dtype, model.model_dtype)
        a1 = attention_bytes_per_token(len(heads[0]), model.head_size, kv_dtype, model.mla)
    gdn = gdn_backend(model, flags)
    alignment = gdn_checkpoint_alignment(gdn) if gdn else 1
    q_heads = model.num_q_heads // tp if model.num_q_heads else None
    kernel = families.first("kernel", model, flags) or kernel_backend(
        flags.attention_backend, flags.gpu, model.head_size, flags.kv_cache_dtype, q_heads,
        len(heads[0]) if heads[0] is not None else None, mla=model.mla)
    state = ranks[0].state_bytes
    if model.ple_qsa is not None:     # the largest of its mamba pages (GDN's, PLE's whole)
        state = max(state, model.ple_qsa.ple_state_bytes(model.num_spec, _dtype_bytes(model.conv_dtype)))
    sized = rank_layouts(replace(model, ssm_dtype=model.sizing_ssm_dtype), tp)[0].state_bytes \
        if model.sizing_ssm_dtype else state
    geometry = derive(sized, a1, flags, alignment, kernel, gdn, model.mla and a1 is not None)
    ratio = page_ratio(model, tp)
    if ratio > 1 and a1 is not None:     # unify_kv_cache_spec_page_size: the target's blocks raised
        block = geometry.block_size * ratio
        kernel_tokens = kernel.kernel_for(block)
        geometry = replace(geometry, block_size=block, kernel_block_size=kernel_tokens, page_bytes=block * a1,
                           blocks_per_logical=block // kernel_tokens,
                           derived_blocks_per_logical=block // kernel_tokens)
    if sized != state:      # startup: the page vLLM sized is the layers' page only if it holds their state
        if geometry.page_bytes < state:
            raise Refused(
                f"vLLM does not start a TP-{tp} engine of {model.name}: it sizes its blocks for a "
                f"{model.sizing_ssm_dtype} SSM state (--mamba-ssm-cache-dtype), a {geometry.page_bytes}-byte page, "
                f"but its KDA layers keep the state in {model.ssm_dtype} ({model.state_source}), {state} bytes: "
                f"MambaSpec.page_size_bytes asserts page_size_padded >= page_size")
        geometry = replace(geometry, state_bytes=state)
    lists = list_shape(grouping, geometry.num_blocks, geometry.blocks_per_logical, attention_streams,
                       len(ranks[0].regions))
    regions = families.first("regions", model, geometry, grouping.ssm_tensors,
                             flags.release.regions_keyed_by_length) or ()
    return EngineLayout(tp, ranks, heads, geometry, lists, kv_dtype, model.head_size,
                        hashed_backend(model, geometry), flags, kernel, mla=model.mla,
                        packed=model.kpool_indexer is not None, regions=regions)


GDN = "gdn"     # the variant whose prefill kernel vLLM chooses by GPU (--gdn-prefill-backend)


def ssm_backend(variant: str) -> str:
    """The backend of an SSM layer, as vLLM names it: ``MAMBA1_ATTN``, ``MAMBA2_ATTN``, ``GDN_ATTN``
    (KDA's layers are GDN's: ``KimiGatedDeltaNetAttention``)."""
    rules = VARIANTS.get(str(variant))
    return (rules.backend if rules and rules.backend else "") or f"{str(variant).upper()}_ATTN"


def hashed_backend(model: ModelSpec, geometry: Geometry) -> str:
    """The backend vLLM's compatibility hash takes: the first cache layer's (``get_current_attn_backends(...)[0]``),
    an SSM backend for a hybrid that starts with an SSM layer."""
    if model.layers and model.layers[0] == "attention":
        return geometry.attention_backend
    return model.ssm_backend or ssm_backend(model.variant)
