"""Nemotron-H in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {"Nemotron-H": FamilyRule(True, config_ssm_dtype=True, note="configs/nemotron_h.py")}
# Nemotron-Nano-VL is a Nemotron-H inside (its llm_config, which mamba2_config hands the pool): read so.
# Served by SGLang with a state mambaxfer does not read (configs/hybrid_arch.py mambaish_config):
# JetNemotron (GDN-like, named alike).
STATE_NOT_READ = {"JetNemotronForCausalLM": ("JetNemotron", "JetNemotronConfig", "hybrid_gdn_config")}
NOT_MODELLED = {"JetNemotronForCausalLM": (
    "its JetBlock layers keep a conv state of their value channels only, the last num_heads · head_v_dim rows "
    "of a Mamba2-shaped conv state whose query and key rows are never written (DynamicShortConvolution, "
    "models/jet_nemotron.py)")}
# The MTP draft class ModelConfig._config_draft_model gives the target's own checkpoint (one layer).
MTP_DRAFTS = {a: "NemotronHForCausalLMMTP" for a in ("NemotronHForCausalLM", "NemotronHPuzzleForCausalLM")}
