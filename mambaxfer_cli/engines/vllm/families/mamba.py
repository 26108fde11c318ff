"""Mamba and Mamba2 in vLLM."""

NO_EAGLE3 = ("MambaForCausalLM", "Mamba2ForCausalLM")    # their classes lack SupportsEagle3
