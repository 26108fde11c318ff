"""Which config keys give each model family's SSM dimensions and layer kinds.

Adding a family is adding a row. A dimension is a list of alternatives tried in order;
each alternative is a tuple of keys whose values multiply (``("mamba_expand", "hidden_size")``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from mambaxfer_cli.planning.model import Variant
from mambaxfer_cli.planning.variants import VARIANTS

Alternatives = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Family:
    label: str
    model_types: tuple[str, ...]
    variant: Variant
    params: Mapping[str, Alternatives]
    conv_kernel: Alternatives
    layers: str = "keys"              # "keys": read the layer-kind keys; "all_ssm"; "parallel"
    ssm_dtype_keys: tuple[str, ...] = ()
    ssm_dtype_default: str | None = None  # None: the conv dtype
    head_size_keys: tuple[str, ...] = ("head_dim",)  # attention head size; else hidden_size / heads
    mla: bool = False                 # its attention is MLA: one latent "head", replicated across TP
    ssm_dtype_fixed: str = ""         # "always": the SSM state is ssm_dtype_default whatever the flags;
                                      # "layer": the same, but --mamba-ssm-cache-dtype sizes the blocks


MAMBA1_HF = {
    "intermediate_size": (("intermediate_size",), ("d_inner",), ("expand", "hidden_size")),
    "d_state": (("state_size",), ("d_state",)),
}

FAMILIES: tuple[Family, ...] = (
    Family("Jamba", ("jamba",), Variant("mamba1"),
           {"intermediate_size": (("mamba_expand", "hidden_size"),),
            "d_state": (("mamba_d_state",),)},
           conv_kernel=(("mamba_d_conv",),)),
    Family("Mamba (HF)", ("mamba",), Variant("mamba1"), MAMBA1_HF,
           conv_kernel=(("conv_kernel",), ("d_conv",)), layers="all_ssm"),
    Family("Falcon-Mamba", ("falcon_mamba",), Variant("mamba1"), MAMBA1_HF,
           conv_kernel=(("conv_kernel",), ("d_conv",)), layers="all_ssm"),
    Family("Mamba2", ("mamba2",), Variant("mamba2"),
           {"intermediate_size": (("expand", "hidden_size"), ("intermediate_size",)),
            "d_state": (("state_size",), ("d_state",)),
            "n_groups": (("n_groups",), ("ngroups",)),
            "num_heads": (("num_heads",),),
            "head_dim": (("head_dim",),)},
           conv_kernel=(("conv_kernel",), ("d_conv",)), layers="all_ssm"),
    Family("Nemotron-H", ("nemotron_h",), Variant("mamba2"),
           {"intermediate_size": (("mamba_num_heads", "mamba_head_dim"),),
            "d_state": (("ssm_state_size",),),
            "n_groups": (("n_groups",),),
            "num_heads": (("mamba_num_heads",),),
            "head_dim": (("mamba_head_dim",),)},
           conv_kernel=(("conv_kernel",),), ssm_dtype_keys=("mamba_ssm_cache_dtype",),
           ssm_dtype_default="float32", head_size_keys=("attention_head_dim", "head_dim")),
    Family("Granite-4.0-H / Bamba", ("granitemoehybrid", "bamba"), Variant("mamba2"),
           {"intermediate_size": (("mamba_expand", "hidden_size"),),
            "d_state": (("mamba_d_state",),),
            "n_groups": (("mamba_n_groups",),),
            "num_heads": (("mamba_n_heads",),),
            "head_dim": (("mamba_d_head",),)},
           conv_kernel=(("mamba_d_conv",),)),
    Family("Falcon-H1", ("falcon_h1",), Variant("mamba2"),
           {"intermediate_size": (("mamba_d_ssm",), ("mamba_expand", "hidden_size")),
            "d_state": (("mamba_d_state",),),
            "n_groups": (("mamba_n_groups",),),
            "num_heads": (("mamba_n_heads",),),
            "head_dim": (("mamba_d_head",),)},
           conv_kernel=(("mamba_d_conv",),), layers="parallel"),
    Family("Zamba2", ("zamba2",), Variant("mamba2"),
           {"intermediate_size": (("mamba_expand", "hidden_size"),),
            "d_state": (("mamba_d_state",),),
            "n_groups": (("mamba_ngroups",),),
            "num_heads": (("n_mamba_heads",),),
            "head_dim": (("mamba_headdim",),)},
           conv_kernel=(("mamba_d_conv",),)),
    Family("Qwen3-Next / Qwen3.5", ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe",
                                    "qwen3_5_moe_text"), Variant("gdn"),
           {"num_k_heads": (("linear_num_key_heads",),),
            "num_v_heads": (("linear_num_value_heads",),),
            "head_k_dim": (("linear_key_head_dim",),),
            "head_v_dim": (("linear_value_head_dim",),)},
           conv_kernel=(("linear_conv_kernel_dim",),), ssm_dtype_keys=("mamba_ssm_dtype",)),
    # KDA + MLA (vLLM's KimiLinearForCausalLM, vllm/models/kimi_k3): linear_attn_config's 1-based
    # kda_layers are KDA, the rest MLA (KimiLinearConfig.is_kda_layer); kda_state_dtype keeps the
    # SSM state in float32 unless --mamba-ssm-cache-dtype says bfloat16. Kimi-K3's text_config is a
    # KimiLinearConfig (model_type kimi_linear, its default where the text_config names none), served
    # by the same KimiDecoderLayer; its full-rank-gate KDA layers are model_config.full_rank_kda's.
    Family("Kimi-Linear", ("kimi_linear", "kimi_k3"), Variant("kda"),
           {"num_heads": (("linear_attn_config.num_heads",),),
            "head_dim": (("linear_attn_config.head_dim",),)},
           conv_kernel=(("linear_attn_config.short_conv_kernel_size",),), layers="kda",
           ssm_dtype_default="float32", ssm_dtype_fixed="layer", mla=True),
    # KDA + MLA (vLLM's BailingMoeV3ForCausalLM, bailing_moe_v3.py): KDA heads are the attention
    # heads; every layer_group_size-th layer and the tail are MLA (_is_kda_layer); the state dtype
    # takes no --mamba-ssm-cache-dtype, in the layer or the class: float32.
    Family("Bailing-V3", ("bailing_hybrid",), Variant("kda"),
           {"num_heads": (("num_attention_heads",),), "head_dim": (("head_dim",),)},
           conv_kernel=(("short_conv_kernel_size",),), layers="bailing_kda",
           ssm_dtype_default="float32", ssm_dtype_fixed="always", mla=True),
    # KDA + gated full attention (vLLM's AliceAIForCausalLM, alice_ai.py): layer_types name each
    # layer; the KDA layers are KimiGatedDeltaNetAttention, float32 whatever the flags.
    Family("AliceAI", ("alice_ai",), Variant("kda"),
           {"num_heads": (("linear_num_key_heads",),), "head_dim": (("linear_key_head_dim",),)},
           conv_kernel=(("linear_conv_kernel_dim",),), ssm_dtype_default="float32", ssm_dtype_fixed="always"),
    # KDA + sparse MLA (vLLM's Glm5NextForCausalLM / ForConditionalGeneration, models/glm5next):
    # layer_types' linear_attention layers are KDA (its layer and class both read
    # --mamba-ssm-cache-dtype: kda_state_dtype), the rest MLA with the sparse-attention indexer
    # (readers/glm5next.py); transformers folds linear_attn_config into the flat keys.
    Family("GLM-5-Next", ("glm5_next", "glm5_next_text"), Variant("kda"),
           {"num_heads": (("linear_attn_config.num_heads",), ("linear_num_heads",)),
            "head_dim": (("linear_attn_config.head_dim",), ("linear_head_dim",))},
           conv_kernel=(("linear_attn_config.short_conv_kernel_size",), ("linear_conv_kernel_dim",)),
           layers="glm5next", ssm_dtype_default="float32", mla=True),
    # GDN as Qwen3.5's, plus a TP-replicated PLE state and QSA indexer caches (readers/qwen4exp.py).
    Family("Qwen4Exp", ("qwen4_exp", "qwen4_exp_text"), Variant("gdn"),
           {"num_k_heads": (("linear_num_key_heads",),),
            "num_v_heads": (("linear_num_value_heads",),),
            "head_k_dim": (("linear_key_head_dim",),),
            "head_v_dim": (("linear_value_head_dim",),)},
           conv_kernel=(("linear_conv_kernel_dim",),), ssm_dtype_keys=("mamba_ssm_dtype",)),
)

# vLLM's served architectures whose language model is a family above (under ``text_config``) or a
# variant's generic keys, by the name vLLM gives them, with the variant vLLM types their layers as
# (model_executor/models/registry.py and each class's ``get_mamba_state_shape_from_config``).
ARCHITECTURE_LABELS: Mapping[str, tuple[str, str]] = {
    "OlmoHybridForCausalLM": ("OLMo-Hybrid", "gdn"),
    "MiniCPMV4_6ForConditionalGeneration": ("MiniCPM-V 4.6", "gdn"),
    "MiniCPMV4_7ForConditionalGeneration": ("MiniCPM-V 4.7", "gdn"),
    "InternS2MobiusForConditionalGeneration": ("InternS2 Mobius", "gdn"),
    "InternS2PreviewForConditionalGeneration": ("InternS2 Preview", "gdn"),
    "ColQwen3_5": ("ColQwen3.5", "gdn"),
    "Nemotron3_5TranscribeForConditionalGeneration": ("Nemotron3.5-Transcribe", "mamba2"),
    "KimiK3ForConditionalGeneration": ("Kimi-K3", "kda"),
}


def labelled(family: Family, architectures: Sequence[str]) -> Family:
    """The family under vLLM's name for the first architecture it names, where its variant is the
    one vLLM types the layers as (a generic guess it confirms is no longer a guess)."""
    for arch in architectures:
        if arch in ARCHITECTURE_LABELS:
            label, variant = ARCHITECTURE_LABELS[arch]
            if family.variant == variant:
                return replace(family, label=label)
    return family


# Used when the model_type is not in the table, or when --variant overrides detection: every
# name any family uses, most specific first (each variant's module lists them).
GENERIC: Mapping[str, Family] = {
    name: Family(f"generic {v.title} (guessed)", (), Variant(name), v.generic_params, conv_kernel=v.generic_conv_kernel,
                 ssm_dtype_keys=v.ssm_dtype_keys)
    for name, v in VARIANTS.items()
}

# Keys whose presence identifies a variant when the model_type is unknown, most specific first.
SIGNATURE_KEYS: tuple[tuple[Variant, tuple[str, ...]], ...] = tuple(
    (Variant(v.name), v.signature) for v in sorted(VARIANTS.values(), key=lambda v: v.detect_rank) if v.signature)

# Recurrent or linear-attention families that exist but are not Mamba1, Mamba2 or GDN.
UNSUPPORTED: Mapping[str, str] = {
    "lfm2": "short-conv (LFM2)",
    "lfm2_moe": "short-conv (LFM2-MoE)",
    "minimax": "lightning attention (MiniMax)",
    "minimax_m1": "lightning attention (MiniMax-M1)",
    "rwkv": "RWKV",
    "rwkv7": "RWKV-7",
    "recurrent_gemma": "RG-LRU (RecurrentGemma)",
    "plamo2": "PLaMo2 Mamba variant",
    "xlstm": "xLSTM",
}


def family_for(model_type: str) -> Family | None:
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    return None


def supported_summary() -> str:
    by_variant: dict[Variant, list[str]] = {}
    for family in FAMILIES:
        by_variant.setdefault(family.variant, []).extend(family.model_types)
    return "; ".join(f"{variant.value}: {', '.join(types)}" for variant, types in by_variant.items())

# The architectures whose config hook hands a config's ``mamba_ssm_dtype`` to the SSM cache
# (vLLM's model_executor/models/config.py: ``Qwen3_5ForConditionalGenerationConfig`` and the
# classes built on it, in ``MODELS_CONFIG_MAP``; the same in 0.33 and 0.34). Every other class,
# Qwen3-Next's among them, ignores the key.
MAMBA_SSM_DTYPE_READERS = frozenset((
    "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForCausalLM",
    "Qwen3_5MoeForConditionalGeneration", "Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration", "Qwen4ExpMTP",
    "ColQwen3_5", "D3ForSequenceClassification",
))

# Architectures vLLM serves whose state its NIXL connector cannot move: ``derive_mamba_conv_split``
# (distributed/kv_transfer/kv_connector/v1/ssm_conv_transfer_utils.py) raises NotImplementedError for
# any mamba_type but MAMBA1, MAMBA2 and GDN_ATTN, when the decode worker starts. Each with its
# family's label and its layers' mamba_type (0.33 and 0.34 alike).
_SHORT_CONV = "vllm.v1.attention.backends.short_conv_attn.ShortConvAttentionBackend"
_LINEAR = "vllm.v1.attention.backends.linear_attn.LinearAttentionBackend"
CONNECTOR_REFUSED: Mapping[str, tuple[str, str, str]] = {
    "Lfm2ForCausalLM": ("LFM2", "SHORT_CONV", _SHORT_CONV),
    "Lfm2MoeForCausalLM": ("LFM2-MoE", "SHORT_CONV", _SHORT_CONV),
    "Lfm2VlForConditionalGeneration": ("LFM2-VL", "SHORT_CONV", _SHORT_CONV),
    "Lfm3ForCausalLM": ("LFM3", "SHORT_CONV", _SHORT_CONV),
    "Lfm3VlForConditionalGeneration": ("LFM3-VL", "SHORT_CONV", _SHORT_CONV),
    "Lfm3AudioForConditionalGeneration": ("LFM3-Audio", "SHORT_CONV", _SHORT_CONV),
    "ZayaForCausalLM": ("Zaya", "SHORT_CONV", _SHORT_CONV),
    "BailingMoeV2_5ForCausalLM": ("Bailing-V2.5", "LINEAR", _LINEAR),
}


# Architectures vLLM serves whose KV cache its NIXL connector cannot register: Kimi-K3.1 (vLLM 0.34,
# KimiK3ForConditionalGeneration with dsa_config). Its DSA indexer's key cache is one entry per token
# (tokens_per_state 1), so get_current_attn_backends_and_specs keeps it, and the connector's
# _sync_block_size_with_kernel takes its backend's 64-token kernel block (KimiK3IndexerBackend) for
# every group; the packed block rows its BLHNC layout forces are never split so, and
# register_kv_caches raises on each engine, prefill and decode, whatever the TP or GPU.
REGISTRATION_REFUSED: Mapping[str, str] = {
    "KimiK31ForConditionalGeneration": "Kimi-K3.1",
}


def connector_refusal(architectures: Sequence[str]) -> str | None:
    """vLLM's own error where its NIXL connector refuses the architecture's state (None: it does not)."""
    for arch in architectures:
        if arch in REGISTRATION_REFUSED:
            return (f"vLLM 0.34 serves {REGISTRATION_REFUSED[arch]} ({arch}), but its NIXL connector refuses its "
                    f"KV cache when each worker registers it: AssertionError: KV cache view cannot be partitioned into "
                    f"NIXL regions (register_kv_caches, after _sync_block_size_with_kernel takes the DSA "
                    f"indexer's 64-token kernel block for the packed block rows)")
    for arch in architectures:
        if arch in CONNECTOR_REFUSED:
            label, member, path = CONNECTOR_REFUSED[arch]
            return (f"vLLM serves {label} ({arch}), but its NIXL connector refuses its state when the decode "
                    f"worker starts: NotImplementedError: Conv transfer only supports Mamba1, Mamba2 and GDN "
                    f"models, got mamba_type=<MambaAttentionBackendEnum.{member}: '{path}'>. "
                    f"(derive_mamba_conv_split)")
    return None
