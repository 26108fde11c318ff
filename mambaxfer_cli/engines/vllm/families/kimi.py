"""Kimi-Linear and Kimi-K3 in vLLM: KDA classes, SupportsReplaySSM, whose RecoverSSM keeps the stock page."""

from __future__ import annotations

from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.planning.startup import architecture_names

# SpeculativeConfig: its MTP method names (aliases of "mtp"), by the release that added them.
MTP_METHODS = {"0.33": ("kimi_k3_mtp",)}

ARCHITECTURES = ("KimiLinearForCausalLM", "KimiK3ForConditionalGeneration", "KimiK31ForConditionalGeneration")


def kda(model: ModelSpec) -> bool | None:
    """True for a model of these architectures or family labels."""
    return any(a in ARCHITECTURES for a in architecture_names(model.hf_config)) or model.family in (
        "Kimi-Linear", "Kimi-K3") or None
