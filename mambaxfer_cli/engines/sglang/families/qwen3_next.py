"""Qwen3-Next / Qwen3.5 in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {
    "Qwen3-Next / Qwen3.5": FamilyRule(True, config_ssm_dtype=True, note="configs/qwen3_next.py (Qwen3.5 inherits it)"),
}
QWEN3_GDN_FILES = {"models/qwen3_next.py": "Qwen3GatedDeltaNet"}   # Qwen3.5's files have their own mixer
