"""Qwen3-Next and Qwen3.5 in vLLM."""

# Qwen3_5ForConditionalGenerationConfig and the classes built on it read mamba_ssm_dtype; Qwen3-Next's does not.
MAMBA_SSM_DTYPE_READERS = ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForCausalLM",
                           "Qwen3_5MoeForConditionalGeneration", "ColQwen3_5")
