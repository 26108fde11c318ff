"""Bailing-V3 (Ling-V3) in SGLang: ``BailingKDA``, a ``KimiDeltaAttention``, beside MLA.

``configs/bailing_hybrid.py`` ``BailingHybridConfig`` (``use_kda``: a ``short_conv_kernel_size``)
gives ``KimiLinearStateShape.create`` its ``num_attention_heads`` and its own ``head_dim`` (the
config's, else ``hidden_size // num_attention_heads``: not ``qk_rope_head_dim`` as vLLM's), and
``linear_layer_ids``: every layer but each ``layer_group_size``-th (``layers_block_type``: no
tail of MLA layers as vLLM's). ``ModelConfig`` sizes its MLA latent ``kv_lora_rank +
qk_rope_head_dim``, the rope part 0 under ``use_mla_nope``."""
from dataclasses import replace

from mambaxfer_cli.engines.sglang.families import FamilyRule
from mambaxfer_cli.planning.model import ATTENTION, SSM, ModelSpec

SGLANG_0_5_23 = {"Bailing-V3": FamilyRule(True, note="configs/bailing_hybrid.py BailingHybridConfig")}


def _as_sglang_reads(model: ModelSpec) -> ModelSpec:
    c = model.hf_config
    if not c:                      # a model not read from a config: as given
        return model
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    group = c.get("layer_group_size", 1)
    layers = tuple(SSM if (i + 1) % group else ATTENTION for i in range(len(model.layers)))
    latent = c["kv_lora_rank"] + (0 if c.get("use_mla_nope") else c["qk_rope_head_dim"])
    return replace(model, params={**model.params, "head_dim": head_dim}, layers=layers, head_size=latent)


# The model as SGLang's config class reads it (shapes.sglang_model), by family label.
SGLANG_READS = {"Bailing-V3": _as_sglang_reads}
