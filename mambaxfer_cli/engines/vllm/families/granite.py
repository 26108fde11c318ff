"""Granite-4.0-H and Bamba in vLLM: its registry removed BambaForCausalLM."""

# transformers 5.20's BambaConfig.layers_block_type (its layer_types): "linear_attention" off attn_layer_indices.
TRANSFORMERS_BACKEND = {"BambaForCausalLM": "linear_attention"}
NO_EAGLE3 = ("GraniteMoeHybridForCausalLM",)    # its class lacks SupportsEagle3
