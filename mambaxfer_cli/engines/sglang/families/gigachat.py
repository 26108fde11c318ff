"""GigaChat3.5 in SGLang: Qwen3GatedDeltaNet layers (models/gigachat35.py), found by the linear-attention
registry (configs/gigachat35.py registers GigaChat35Config), whose mamba2_cache_params passes no
conv_shard_groups: SGLang slices its conv state across TP sizes as one block."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {
    "GigaChat3.5": FamilyRule(True, config_ssm_dtype=True, conv_shard_groups=False, note="configs/gigachat35.py"),
}
QWEN3_GDN_FILES = {"models/gigachat35.py": "GigaChat35GatedDeltaNet, a Qwen3GatedDeltaNet"}
