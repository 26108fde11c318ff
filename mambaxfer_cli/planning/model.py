"""The model as the planner sees it: variant, dimensions, dtypes and layer kinds."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Mapping

from mambaxfer_cli.planning.variants import VARIANTS, VariantRules


class Variant(str):
    """A variant's name: one of ``planning/variants/``'s modules, whose ``VariantRules`` say the rest."""

    def __new__(cls, name: str) -> Variant:
        if str(name) not in VARIANTS:
            raise ValueError(f"'{name}' is not a variant; mambaxfer knows {', '.join(VARIANTS)}")
        return super().__new__(cls, str(name))

    @property
    def value(self) -> str:
        return str(self)

    @property
    def rules(self) -> VariantRules:
        return VARIANTS[self]


SSM = "ssm"
ATTENTION = "attention"


@dataclass(frozen=True)
class FamilyPart:
    """What only one family keeps, under ``key`` in the model's JSON."""

    key: str = field(kw_only=True)     # the family module's name

    def to_dict(self) -> dict[str, Any]:
        """Its fields but ``key``, tuples as lists."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)
                if f.name != "key"}


@dataclass(frozen=True)
class PleQsaParts(FamilyPart):
    """Qwen4Exp's PLE short-conv states (``tp_replicated``: every rank holds all channels) and QSA
    indexer caches, beside its GDN and attention layers (vLLM's ``models/qwen4_exp``)."""

    ple_layers: tuple[int, ...]        # 0-based decoder layers with a PLE state (ple_layer_ids - 1)
    ple_channels: int                  # hc_count * hidden_size
    ple_state_len: int                 # (ple_conv_kernel_size - 1) * ngram_size
    indexer_head_dim: int | None = None  # None: no QSA (indexer_n_heads absent)
    compress_ratio: int | None = None  # indexer_compress_ratio
    rope_positions: bool = False       # M-RoPE: the raw-key ring also keeps each token's 3 positions
    indexer_kv_dtype: str = "bf16"     # the compressed keys' dtype (--attention-config indexer_kv_dtype)

    @property
    def has_qsa(self) -> bool:
        return self.indexer_head_dim is not None

    def ple_state_bytes(self, num_spec: int, dtype_size: int) -> int:
        """One PLE layer's state on any rank (``short_conv_state_shape``, ``tp_world_size=1``)."""
        return self.ple_channels * (self.ple_state_len + num_spec) * dtype_size if self.ple_layers else 0


@dataclass(frozen=True)
class KpoolIndexerParts(FamilyPart):
    """GLM-5-Next's sparse-attention indexer beside each MLA layer (vLLM's ``models/glm5next``): its compressed
    keys, its kpool tail ring and the MLA dimensions its sparse backend is chosen by."""

    index_kpool: int
    index_head_dim: int
    index_topk: int
    kv_lora_rank: int
    qk_nope_head_dim: int


@dataclass(frozen=True)
class ModelSpec:
    """Everything the planner needs from a model config, already validated."""

    name: str
    source: str
    variant: Variant
    params: Mapping[str, int]
    layers: tuple[str, ...]          # cache-keeping layers in model order: "ssm" | "attention"
    conv_kernel: int
    num_spec: int
    conv_dtype: str
    ssm_dtype: str
    num_kv_heads: int | None = None  # attention KV heads (None: no attention layers)
    family: str = ""
    head_size: int | None = None     # attention head size (K and V), with attention layers
    model_dtype: str = "bfloat16"    # the model's dtype: the KV cache's with --kv-cache-dtype auto
    num_q_heads: int | None = None   # attention query heads, where the config says (FlashInfer's pages)
    revision: str | None = None      # the Hugging Face cache snapshot the config was read from
    checkpoint_dtype: str = ""       # the config's own dtype where the engine runs another ("": the same)
    origin: Mapping[str, str] = field(default_factory=dict, compare=False)  # what gave each dtype
    mla: bool = False                # MLA: one latent vector per token (head_size), every rank whole
    sizing_ssm_dtype: str = ""       # the SSM dtype vLLM sizes the blocks for, where not ssm_dtype (KDA)
    ssm_backend: str = ""            # its SSM layers' backend name, where not the variant's (Kimi-K3's KDA)
    state_source: str = ""           # vLLM's function that fixes the SSM state dtype whatever sizes the blocks
    # The Hugging Face config as read (empty for a model given another way), for conformance.
    hf_config: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    ple_qsa: PleQsaParts | None = None     # Qwen4Exp's PLE state and QSA caches
    kpool_indexer: KpoolIndexerParts | None = None  # GLM-5-Next's sparse-attention indexer caches
    hidden_layers: int = 0           # the config's num_hidden_layers (0: not said): every decoder layer
    # Each cache-keeping layer's decoder layer number (MLP and MoE layers counted); empty: its place.
    layer_ids: tuple[int, ...] = ()
    draft_layers: int = 0            # the last of ``layers`` are a drafter's (an engine's speculative decoding)
    draft_attention: tuple[int, int] | None = None  # their KV heads and head size where not the target's

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))
        object.__setattr__(self, "origin", MappingProxyType(dict(self.origin)))
        object.__setattr__(self, "hf_config", MappingProxyType(dict(self.hf_config)))
        assert not self.has_attention or (self.num_kv_heads and self.head_size), \
            "a model with attention layers needs its KV heads and head size"

    @property
    def has_attention(self) -> bool:
        return ATTENTION in self.layers

    @property
    def ssm_layers(self) -> int:
        return sum(1 for kind in self.layers if kind == SSM)

    @property
    def attention_layers(self) -> int:
        return sum(1 for kind in self.layers if kind == ATTENTION)

    @property
    def ssm_layer_ids(self) -> tuple[int, ...]:
        """The SSM layers' numbers as the model gives them (``layer_ids``), else their places."""
        ids = self.layer_ids or range(len(self.layers))
        return tuple(i for i, kind in zip(ids, self.layers) if kind == SSM)

    @property
    def attention_indices(self) -> tuple[int, ...]:
        """The attention layers' indices among the cache-keeping layers."""
        return tuple(i for i, kind in enumerate(self.layers) if kind == ATTENTION)

    @property
    def hashed_layers(self) -> int:
        """The layer count vLLM's compatibility hash takes (``get_total_num_hidden_layers``)."""
        return self.hidden_layers or len(self.layers) - self.draft_layers

    @property
    def conv_rows(self) -> int:
        return self.conv_kernel - 1 + (self.num_spec if self.variant.rules.speculative_rows else 0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "variant": self.variant.value,
            "ssm_layers": self.ssm_layers,
            "attention_layers": self.attention_layers,
            "conv_kernel": self.conv_kernel,
            "num_spec": self.num_spec,
            "conv_dtype": self.conv_dtype,
            "ssm_dtype": self.ssm_dtype,
            "params": dict(self.params),
            "attention": ({"num_kv_heads": self.num_kv_heads, "head_size": self.head_size,
                           "dtype": self.model_dtype, **({"mla": True} if self.mla else {})}
                          if self.has_attention else None),
            **({"revision": self.revision} if self.revision else {}),
            **({"draft_layers": self.draft_layers} if self.draft_layers else {}),
            **({"draft_attention": list(self.draft_attention)} if self.draft_attention else {}),
            **{part.key: part.to_dict() for part in (self.ple_qsa, self.kpool_indexer) if part},
            "origin": dict(self.origin),
        }
