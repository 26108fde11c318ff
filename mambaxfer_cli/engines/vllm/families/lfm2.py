"""LFM2 and LFM3 in vLLM: short-conv state, which its NIXL connector refuses."""

# vLLM's startup.CONNECTOR_REFUSED: each architecture's label and its layers' mamba_type.
CONNECTOR_REFUSED = {arch: (label, "SHORT_CONV") for arch, label in (
    ("Lfm2ForCausalLM", "LFM2"), ("Lfm2MoeForCausalLM", "LFM2-MoE"), ("Lfm2VlForConditionalGeneration", "LFM2-VL"),
    ("Lfm3ForCausalLM", "LFM3"), ("Lfm3VlForConditionalGeneration", "LFM3-VL"),
    ("Lfm3AudioForConditionalGeneration", "LFM3-Audio"))}
