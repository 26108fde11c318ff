"""Gated DeltaNet: conv channels ``Q``, ``K`` and ``V`` by head, and an SSM state per value head."""

from mambaxfer_cli.planning.variants import RegionShape, VariantRules, param

VARIANT = VariantRules(
    name="gdn", title="GDN", order=3,
    regions=(
        RegionShape("Q", "conv", "channel", lambda p: p["num_k_heads"] * p["head_k_dim"],
                    param("num_k_heads"), "num_k_heads"),
        RegionShape("K", "conv", "channel", lambda p: p["num_k_heads"] * p["head_k_dim"],
                    param("num_k_heads"), "num_k_heads"),
        RegionShape("V", "conv", "channel", lambda p: p["num_v_heads"] * p["head_v_dim"],
                    param("num_v_heads"), "num_v_heads"),
        RegionShape("ssm", "ssm", "head", param("num_v_heads"), param("num_v_heads"), "num_v_heads",
                    unit_elements=lambda p: p["head_v_dim"] * p["head_k_dim"]),
    ),
    region_ids={"Q": 4, "K": 5, "V": 6, "ssm": 7},
    colours={"Q": "cyan", "K": "magenta", "V": "yellow", "ssm": "green"},
    generic_params={
        "num_k_heads": (("linear_num_key_heads",),),
        "num_v_heads": (("linear_num_value_heads",),),
        "head_k_dim": (("linear_key_head_dim",),),
        "head_v_dim": (("linear_value_head_dim",),),
    },
    generic_conv_kernel=(("linear_conv_kernel_dim",), ("conv_kernel",)),
    ssm_dtype_keys=("mamba_ssm_dtype",),
    signature=("linear_num_value_heads", "linear_num_key_heads"),
    detect_rank=1,
)
