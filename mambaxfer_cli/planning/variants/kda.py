"""Kimi Delta Attention (KDA): conv channels ``Q``, ``K`` and ``V`` (``num_heads·head_dim`` each,
by head) and an SSM state of ``head_dim × head_dim`` per head: vLLM's
``MambaStateShapeCalculator.kda_state_shape``, split by the connector as GDN's
(``derive_mamba_conv_split``), of backend ``GDN_ATTN``.
"""

from mambaxfer_cli.planning.variants import Params, RegionShape, VariantRules, param

_H = param("num_heads")


def _channels(p: Params) -> int:
    return p["num_heads"] * p["head_dim"]


VARIANT = VariantRules(
    name="kda", title="KDA", order=4,
    regions=(
        RegionShape("Q", "conv", "channel", _channels, _H, "num_heads"),
        RegionShape("K", "conv", "channel", _channels, _H, "num_heads"),
        RegionShape("V", "conv", "channel", _channels, _H, "num_heads"),
        RegionShape("ssm", "ssm", "head", _H, _H, "num_heads",
                    unit_elements=lambda p: p["head_dim"] * p["head_dim"]),
    ),
    region_ids={"Q": 4, "K": 5, "V": 6, "ssm": 7},
    colours={"Q": "cyan", "K": "magenta", "V": "yellow", "ssm": "green"},
    generic_params={
        "num_heads": (("linear_attn_config.num_heads",),),
        "head_dim": (("linear_attn_config.head_dim",),),
    },
    generic_conv_kernel=(("linear_attn_config.short_conv_kernel_size",),),
    backend="GDN_ATTN",
)
