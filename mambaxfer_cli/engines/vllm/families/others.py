"""Architectures vLLM serves of no family module."""

CONNECTOR_REFUSED = {"ZayaForCausalLM": ("Zaya", "SHORT_CONV")}
MAMBA_SSM_DTYPE_READERS = ("D3ForSequenceClassification",)
