"""Jamba in vLLM."""

NO_EAGLE3 = ("JambaForCausalLM",)    # its class lacks SupportsEagle3
