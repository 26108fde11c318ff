"""Zamba2 in vLLM."""

NO_EAGLE3 = ("Zamba2ForCausalLM",)    # its class lacks SupportsEagle3
