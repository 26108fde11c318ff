"""Qwen3-Next / Qwen3.5 in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {
    "Qwen3-Next / Qwen3.5": FamilyRule(True, config_ssm_dtype=True, note="configs/qwen3_next.py (Qwen3.5 inherits it)"),
}
QWEN3_GDN_FILES = {"models/qwen3_next.py": "Qwen3GatedDeltaNet"}   # Qwen3.5's files have their own mixer
# The MTP draft class ModelConfig._config_draft_model gives the target's own checkpoint (one layer).
MTP_DRAFTS = {"Qwen3NextForCausalLM": "Qwen3NextForCausalLMMTP",
              **{a: "Qwen3_5ForCausalLMMTP" for a in ("Qwen3_5ForConditionalGeneration", "Qwen3_5ForCausalLM",
                                                      "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM")}}
