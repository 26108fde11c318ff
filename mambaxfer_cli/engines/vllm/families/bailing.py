"""Bailing in vLLM."""

MTP_METHODS = {"0.33": ("bailing_hybrid_mtp", "bailing_hybrid_v3_mtp")}

CONNECTOR_REFUSED = {"BailingMoeV2_5ForCausalLM": ("Bailing-V2.5", "LINEAR")}
