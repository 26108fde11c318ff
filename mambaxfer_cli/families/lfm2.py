"""LFM2 and LFM3: short-conv layers, which mambaxfer does not move and vLLM's connector refuses."""

from mambaxfer_cli.families import SHORT_CONV_BACKEND

UNSUPPORTED = {"lfm2": "short-conv (LFM2)", "lfm2_moe": "short-conv (LFM2-MoE)"}
CONNECTOR_REFUSED = {arch: (label, "SHORT_CONV", SHORT_CONV_BACKEND) for arch, label in (
    ("Lfm2ForCausalLM", "LFM2"), ("Lfm2MoeForCausalLM", "LFM2-MoE"), ("Lfm2VlForConditionalGeneration", "LFM2-VL"),
    ("Lfm3ForCausalLM", "LFM3"), ("Lfm3VlForConditionalGeneration", "LFM3-VL"),
    ("Lfm3AudioForConditionalGeneration", "LFM3-Audio"))}
