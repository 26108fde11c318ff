"""Nemotron-H in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {"Nemotron-H": FamilyRule(True, config_ssm_dtype=True, note="configs/nemotron_h.py")}
# Served by SGLang with a state mambaxfer does not read (configs/hybrid_arch.py mambaish_config):
# Nemotron-Nano-VL (a Nemotron-H inside, its llm_config) and JetNemotron (GDN-like, named alike).
STATE_NOT_READ = {
    "NemotronH_Nano_VL_V2": ("Nemotron-Nano-VL", "NemotronH_Nano_VL_V2_Config", "mamba2_config"),
    "JetNemotronForCausalLM": ("JetNemotron", "JetNemotronConfig", "hybrid_gdn_config"),
}
# The MTP draft class ModelConfig._config_draft_model gives the target's own checkpoint (one layer).
MTP_DRAFTS = {a: "NemotronHForCausalLMMTP" for a in ("NemotronHForCausalLM", "NemotronHPuzzleForCausalLM")}
