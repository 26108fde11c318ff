"""Kimi-Linear and Kimi-K3: KDA + MLA (vLLM's KimiLinearForCausalLM, vllm/models/kimi_k3).

``linear_attn_config``'s 1-based ``kda_layers`` are KDA, the rest MLA (``KimiLinearConfig.is_kda_layer``);
``kda_state_dtype`` keeps the SSM state in float32 unless --mamba-ssm-cache-dtype says bfloat16.
Kimi-K3's text_config is a KimiLinearConfig (model_type kimi_linear, its default where the
text_config names none), served by the same KimiDecoderLayer. Its full-rank-gate layers
(``KimiK3DeltaAttention``) keep the same state under another backend name, ``KIMI_K3_KDA``
(``KimiK3KDAAttentionBackend``, a GDN backend), and read --mamba-ssm-cache-dtype in layer and class.
"""

from __future__ import annotations

from dataclasses import replace

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.families import Config, Family, list_key
from mambaxfer_cli.planning.model import ATTENTION, SSM, Variant

# KimiK3DeltaAttention.get_attn_backend: KimiK3KDAAttentionBackend, a GDNAttentionBackend by this name.
KIMI_K3_KDA = "KIMI_K3_KDA"


def layer_kinds(config: Config, n_layers: int | None, where: str) -> tuple[str, ...]:
    """``KimiLinearConfig.is_kda_layer``: layer ``i`` is KDA when ``i + 1`` is in
    ``linear_attn_config.kda_layers`` (1-based), else MLA."""
    if n_layers is None:
        raise UserError(f"{where}: missing key for the layer count: expected num_hidden_layers")
    key = "linear_attn_config.kda_layers"
    if key not in config:
        raise UserError(f"{where}: missing key linear_attn_config.kda_layers (the 1-based KDA layers)")
    kda = set(list_key(config, key, int, where))
    return tuple(SSM if i + 1 in kda else ATTENTION for i in range(n_layers))


def full_rank(family: Family, config: Config) -> Family:
    """Under ``use_full_rank_gate`` the KDA layers are KimiK3DeltaAttention's."""
    if not config.get("linear_attn_config.use_full_rank_gate"):
        return family
    return replace(family, ssm_dtype_fixed="", ssm_backend=KIMI_K3_KDA, backend_state_note=(
        "its full-rank-gate KDA layers (KimiK3DeltaAttention) keep the SSM state in {dtype} under "
        "--mamba-ssm-cache-dtype auto (kda_state_dtype)"))


FAMILIES = (
    Family("Kimi-Linear", ("kimi_linear", "kimi_k3"), Variant("kda"),
           {"num_heads": (("linear_attn_config.num_heads",),),
            "head_dim": (("linear_attn_config.head_dim",),)},
           conv_kernel=(("linear_attn_config.short_conv_kernel_size",),), layer_kinds=layer_kinds,
           ssm_dtype_default="float32", ssm_dtype_fixed="layer", mla=True, order=10,
           fixed_state_source="KimiGatedDeltaNetAttention.get_state_dtype", refine=full_rank,
           # KimiK3MultiTokenPredictor: text_config's num_nextn_predict_layers KimiDecoderLayers at
           # indices from num_hidden_layers on, none of them a KDA layer, so each MLA.
           mtp_keys={"kimi_k3": "num_nextn_predict_layers"}, mtp_kind=ATTENTION),
)
LABELS = {"float32 KDA state": "Kimi-Linear"}    # its KDA layers fix the state's dtype
ARCHITECTURE_LABELS = {"KimiK3ForConditionalGeneration": ("Kimi-K3", "kda")}
