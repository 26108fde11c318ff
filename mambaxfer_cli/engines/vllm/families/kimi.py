"""Kimi-Linear and Kimi-K3 in vLLM: KDA classes, SupportsReplaySSM, whose RecoverSSM keeps the stock page."""

from __future__ import annotations

from typing import Any, Mapping

from mambaxfer_cli.errors import Refused, quoted
from mambaxfer_cli.families.kimi import FAMILIES, KIMI_K3_KDA
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.planning.startup import architecture_names

MTP_METHODS = {"0.33": ("kimi_k3_mtp",)}

ARCHITECTURES = ("KimiLinearForCausalLM", "KimiK3ForConditionalGeneration", "KimiK31ForConditionalGeneration")


def attention_refusal(model_type: str, config: Mapping[str, Any], where: str) -> None:
    """``KimiDecoderLayer.__init__`` on an MLA layer asserts the MLA keys are set and ``mla_use_nope``
    is true (``KimiLinearConfig``'s defaults are None and false): vLLM stops as it builds the model."""
    if model_type not in FAMILIES[0].model_types:
        return
    for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "kv_lora_rank"):
        if config.get(key) is None:
            raise Refused(f"{where}: vLLM does not start: its MLA layers need {key}, which the config does not "
                          f"set (KimiDecoderLayer.__init__: assert {key} is not None)")
    if not config.get("mla_use_nope"):
        raise Refused(f"{where}: vLLM does not start: \"Kimi-K3 MLA (MultiHeadLatentAttention) is NoPE-only\": "
                      f"its MLA layers need mla_use_nope true (KimiDecoderLayer.__init__'s assert), got "
                      f"{quoted(config.get('mla_use_nope'))}")


def kda(model: ModelSpec) -> bool | None:
    """True for a model of these architectures or family labels."""
    return any(a in ARCHITECTURES for a in architecture_names(model.hf_config)) or model.family in (
        "Kimi-Linear", "Kimi-K3") or None


def kda_layer(model: ModelSpec) -> tuple[str, str] | None:
    """The (module, class) the conformance probe builds KDA layers of: KimiDecoderLayer's under
    use_full_rank_gate (Kimi-K3), else vLLM's KDA layer."""
    if model.variant != "kda":
        return None
    if model.ssm_backend == KIMI_K3_KDA:
        return "vllm.models.kimi_k3.nvidia.kda", "KimiK3DeltaAttention"
    return "vllm.model_executor.layers.mamba.gdn.kimi_gdn_linear_attn", "KimiGatedDeltaNetAttention"


def kda_state_dtype_args(model: ModelSpec) -> tuple[str, ...] | None:
    """Kimi-K3's layer (``KimiK3DeltaAttention.get_state_dtype``) passes ``kda_state_dtype`` the SSM dtype too."""
    return (model.ssm_dtype,) if model.ssm_backend == KIMI_K3_KDA else None

# Kimi-K3.1 (vLLM 0.34, KimiK3ForConditionalGeneration with dsa_config): its DSA indexer's key cache is
# one entry per token (tokens_per_state 1), so get_current_attn_backends_and_specs keeps it, and the
# connector's _sync_block_size_with_kernel takes its backend's 64-token kernel block
# (KimiK3IndexerBackend) for every group; the packed block rows its BLHNC layout forces are never split
# so, and register_kv_caches raises on each engine, prefill and decode, whatever the TP or GPU.
REGISTRATION_REFUSED = {"KimiK31ForConditionalGeneration": "Kimi-K3.1"}
