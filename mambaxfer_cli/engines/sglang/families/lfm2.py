"""LFM2 in SGLang: a short-conv state (configs/hybrid_arch.py mamba2_config finds it in each config
class below), whose ``mamba2_cache_params`` is ``Mamba2StateShape.create`` over ``hidden_size``
channels with no SSM state (``state_size`` 0, ``num_heads`` the TP size), no ``conv_shard_groups``."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {
    "LFM2": FamilyRule(True, config_ssm_dtype=True, note="configs/lfm2.py Lfm2Config"),
    "LFM2-MoE": FamilyRule(True, note="configs/lfm2_moe.py Lfm2MoeConfig"),
    "LFM2-VL": FamilyRule(True, note="configs/lfm2_vl.py Lfm2VlConfig"),
}

# Conformance: SGLang's short-conv config class and mixer, by the name conformance reports each.
SHORT_CONV_CONFIG = ("short-conv config state", "sglang.srt.configs.lfm2", "Lfm2Config")
SHORT_CONV_MIXER = ("Lfm2ShortConv conv channels", "sglang.srt.models.lfm2", "Lfm2ShortConv")
