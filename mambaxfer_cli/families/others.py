"""Architectures and model types of no family module: served under a variant's generic keys, or
of a kind mambaxfer does not move."""

ARCHITECTURE_LABELS = {
    "OlmoHybridForCausalLM": ("OLMo-Hybrid", "gdn"),
    "MiniCPMV4_6ForConditionalGeneration": ("MiniCPM-V 4.6", "gdn"),
    "MiniCPMV4_7ForConditionalGeneration": ("MiniCPM-V 4.7", "gdn"),
    "InternS2MobiusForConditionalGeneration": ("InternS2 Mobius", "gdn"),
    "InternS2PreviewForConditionalGeneration": ("InternS2 Preview", "gdn"),
}
UNSUPPORTED = {
    "minimax": "lightning attention (MiniMax)",
    "minimax_m1": "lightning attention (MiniMax-M1)",
    "rwkv": "RWKV",
    "rwkv7": "RWKV-7",
    "recurrent_gemma": "RG-LRU (RecurrentGemma)",
    "plamo2": "PLaMo2 Mamba variant",
    "xlstm": "xLSTM",
}
