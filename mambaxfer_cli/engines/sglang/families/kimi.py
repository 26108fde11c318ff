"""Kimi-Linear and Kimi-K3 in SGLang: KDA (``KimiDeltaAttention``) beside MLA. Their config class
(``configs/kimi_linear.py``; Kimi-K3's ``text_config`` is one) gives the pool
``KimiLinearCacheParams``: ``KimiLinearStateShape.create`` at the attention TP size, layers
``linear_layer_ids`` (the decoder layers ``i`` with ``i + 1`` in ``kda_layers``), and no config for
``mamba2_state_dtype``."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {
    "Kimi-Linear": FamilyRule(True, note="configs/kimi_linear.py KimiLinearConfig"),
    "Kimi-K3": FamilyRule(True, note="configs/kimi_k3.py KimiK3Config (its text_config a KimiLinearConfig)"),
}

# Conformance: SGLang's KDA state shapes (configs/mamba_utils.py) as it reports them, the cache params
# its pool takes, and stand-in shapes beside the presets (odd dimensions, key heads apart).
KDA_SHAPES = ("KimiLinearStateShape.create", "Kimi-Linear's state shapes")
KDA_CACHE_PARAMS = "KimiLinearCacheParams"
KDA_STAND_INS: tuple[dict[str, int], ...] = (
    {"num_heads": 32, "head_dim": 128, "conv_kernel": 4},
    {"num_heads": 16, "head_dim": 64, "num_k_heads": 8, "head_k_dim": 32, "conv_kernel": 3})
# Conformance: the KDA mixer whose weight loaders give a rank's conv channels (Bailing's BailingKDA is
# one), and the config class it is built with.
KDA_MIXER = ("KimiDeltaAttention conv channels", "sglang.srt.models.kimi_linear", "KimiDeltaAttention",
             "the checkpoint q/k/v channels of a rank's KDA conv state")
KDA_MIXER_CONFIG = ("sglang.srt.configs.kimi_linear", "KimiLinearConfig")
