"""MiniCPM-SALA in SGLang: ``configs/minicpm.py`` ``MiniCPMHybridConfig.mamba2_cache_params`` is
``Mamba2StateShape.create`` with no conv (``intermediate_size`` 0, ``conv_kernel`` 1: a zero-size
entry ``MambaPool`` does not advertise) and a temporal ``(lightning_nkv / TP, lightning_head_dim,
lightning_head_dim)``, layers ``lightning_layer_ids``, no config for ``mamba2_state_dtype``. Its
InfLLM-v2 layers keep only the token pool's K and V (their compressed keys are rebuilt per forward)."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {"MiniCPM-SALA": FamilyRule(True, note="configs/minicpm.py MiniCPMHybridConfig")}
CONFIG_STATES = {"MiniCPM-SALA": ("MiniCPMHybridConfig state", "sglang.srt.configs.minicpm", "MiniCPMHybridConfig")}
