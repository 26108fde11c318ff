"""Falcon-H1 in vLLM."""

NO_EAGLE3 = ("FalconH1ForCausalLM",)    # its class lacks SupportsEagle3
