"""GLM-5-Next: KDA + sparse MLA (vLLM's Glm5NextForCausalLM / ForConditionalGeneration,
models/glm5next). ``layer_types``' linear_attention layers are KDA (its layer and class both read
--mamba-ssm-cache-dtype: kda_state_dtype), the rest MLA with the sparse-attention indexer;
transformers folds ``linear_attn_config`` into the flat keys.

Defaults and checks are those of transformers' ``Glm5NextTextConfig``, which vLLM loads the
config with: every fourth layer (``i % 4 == 3``) is an MLA layer when ``layer_types`` is absent,
``index_kpool`` 16, ``index_head_dim`` 128, ``index_topk`` 2048 (an integer: every GLM-5-Next has
the indexer), NoPE attention (``qk_rope_head_dim`` 0), ``q_lora_rank`` required; and vLLM's own
(``_validate_supported_config``, ``Glm5NextIndexerCache``: ``engines/vllm/families/glm5next.py``).
"""

from __future__ import annotations

from typing import Any, Mapping

from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.families import Config, Family, dim_key
from mambaxfer_cli.planning.model import ATTENTION, SSM, KpoolIndexerParts, Variant

FAMILY = "GLM-5-Next"
MODEL_TYPES = ("glm5_next", "glm5_next_text")
# transformers' defaults (Glm5NextTextConfig) for the keys the transfer depends on.
DEFAULTS = {"index_kpool": 16, "index_head_dim": 128, "index_topk": 2048, "kv_lora_rank": 512,
            "qk_nope_head_dim": 256, "qk_rope_head_dim": 0}


def _int(config: Mapping[str, Any], key: str, where: str, minimum: int = 1) -> int:
    return dim_key(config, key, DEFAULTS[key], where, minimum)


def glm5next_parts(config: Mapping[str, Any], where: str) -> KpoolIndexerParts:
    """The indexer and MLA dimensions of a flattened GLM-5-Next config, refused as transformers
    refuses them when loading the config."""
    rope = _int(config, "qk_rope_head_dim", where, minimum=0)
    if rope:
        raise Refused(f"{where}: transformers' Glm5NextTextConfig refuses it: \"Expecting NoPE for the DSA "
                        f"attention layers, but got {rope} as RoPE dim.\"")
    if config.get("q_lora_rank") is None:
        raise Refused(f"{where}: transformers' Glm5NextTextConfig refuses it: \"For DSA usage in the attention "
                        f"layers, the `q_lora_rank` is strictly required!\"")
    heads, kv_heads = config.get("num_attention_heads"), config.get("num_key_value_heads")
    if kv_heads is not None and heads is not None and kv_heads != heads:
        raise Refused(f"{where}: transformers' Glm5NextTextConfig refuses it: num_attention_heads ({heads}) must "
                        f"be the same as num_key_value_heads ({kv_heads})")
    kpool, topk = _int(config, "index_kpool", where), _int(config, "index_topk", where)
    if topk % kpool:
        raise Refused(f"{where}: transformers' Glm5NextTextConfig refuses it: index_topk ({topk}) must be "
                        f"divisible by index_kpool ({kpool})")
    return KpoolIndexerParts(kpool, _int(config, "index_head_dim", where), topk, _int(config, "kv_lora_rank", where),
                         _int(config, "qk_nope_head_dim", where), key="glm5next")


def layer_kinds(config: Config, n_layers: int | None, where: str) -> tuple[str, ...] | None:
    """Where ``layer_types`` is absent, ``Glm5NextTextConfig.__post_init__``'s: KDA (``linear_attention``)
    where ``i % 4 != 3``, the rest MLA (``indexed_attention``); else the layer-kind keys."""
    if "layer_types" in config:
        return None
    if n_layers is None:
        raise UserError(f"{where}: missing key for the layer count: expected num_hidden_layers")
    return tuple(SSM if i % 4 != 3 else ATTENTION for i in range(n_layers))


def parts(config: Config, layers: tuple[str, ...], where: str, indexer_kv_dtype: str | None) -> Mapping[str, Any]:
    return {"kpool_indexer": glm5next_parts(config, where) if ATTENTION in layers else None}


FAMILIES = (
    Family(FAMILY, MODEL_TYPES, Variant("kda"),
           {"num_heads": (("linear_attn_config.num_heads",), ("linear_num_heads",)),
            "head_dim": (("linear_attn_config.head_dim",), ("linear_head_dim",))},
           conv_kernel=(("linear_attn_config.short_conv_kernel_size",), ("linear_conv_kernel_dim",)),
           layer_kinds=layer_kinds, ssm_dtype_default="float32", mla=True, parts=parts, order=13,
           # vLLM's Glm5NextMultiTokenPredictor: num_nextn_predict_layers MLA layers (is_mtp_layer:
           # never KDA), each with the indexer's caches; hf_config_override converts glm5_next alone.
           mtp_keys={"glm5_next": "num_nextn_predict_layers"}, mtp_kind=ATTENTION),
)
