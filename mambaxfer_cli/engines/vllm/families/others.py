"""Architectures vLLM serves of no family module."""

CONNECTOR_REFUSED = {"ZayaForCausalLM": ("Zaya", "SHORT_CONV")}
