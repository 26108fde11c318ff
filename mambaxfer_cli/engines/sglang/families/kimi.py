"""Kimi-Linear and Kimi-K3 in SGLang."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {
    "Kimi-Linear": FamilyRule(False, engine_serves=True,
                              note="SGLang 0.5.23 serves Kimi-Linear (models/kimi_linear.py), but mambaxfer does not "
                                   "model its KDA and MLA transfer yet"),
    "Kimi-K3": FamilyRule(False, engine_serves=True,
                          note="SGLang 0.5.23 serves Kimi-K3 (srt/models/kimi_k3.py), but mambaxfer does not model "
                               "its KDA and MLA transfer for SGLang"),
}

# Conformance: SGLang's KDA state shapes (configs/mamba_utils.py) as it reports them, the cache params
# its pool takes, and stand-in shapes (mambaxfer has no preset of the family for SGLang).
KDA_SHAPES = ("KimiLinearStateShape.create", "Kimi-Linear's state shapes")
KDA_CACHE_PARAMS = "KimiLinearCacheParams"
KDA_STAND_INS: tuple[dict[str, int], ...] = (
    {"num_heads": 32, "head_dim": 128, "conv_kernel": 4},
    {"num_heads": 16, "head_dim": 64, "num_k_heads": 8, "head_k_dim": 32, "conv_kernel": 3})
