"""Nemotron-H in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {"Nemotron-H": FamilyRule(True, config_ssm_dtype=True, note="configs/nemotron_h.py")}
# Nemotron-Nano-VL is a Nemotron-H inside (its llm_config, which mamba2_config hands the pool): read so.
# The MTP draft class ModelConfig._config_draft_model gives the target's own checkpoint (one layer).
MTP_DRAFTS = {a: "NemotronHForCausalLMMTP" for a in ("NemotronHForCausalLM", "NemotronHPuzzleForCausalLM")}
