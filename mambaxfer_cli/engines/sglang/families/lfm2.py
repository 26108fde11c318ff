"""LFM2 in SGLang: served with a short-conv state (configs/hybrid_arch.py mamba2_config finds it in
each config class below), which mambaxfer does not model; ``served.py`` refuses it so."""
STATE_NOT_READ = {
    "Lfm2ForCausalLM": ("LFM2", "Lfm2Config", "mamba2_config"),
    "Lfm2MoeForCausalLM": ("LFM2-MoE", "Lfm2MoeConfig", "mamba2_config"),
    "Lfm2VlForConditionalGeneration": ("LFM2-VL", "Lfm2VlConfig", "mamba2_config"),
}
