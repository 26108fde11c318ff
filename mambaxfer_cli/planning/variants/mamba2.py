"""Mamba2: conv channels ``x``, ``B`` and ``C`` (B and C by group) and an SSM state per head."""

from mambaxfer_cli.planning.variants import RegionShape, VariantRules, param

_I = param("intermediate_size")

VARIANT = VariantRules(
    name="mamba2", title="Mamba2", order=2,
    regions=(
        RegionShape("x", "conv", "channel", _I, _I, "intermediate_size"),
        RegionShape("B", "conv", "channel", lambda p: p["n_groups"] * p["d_state"], param("n_groups"),
                    "n_groups", replicable=True),
        RegionShape("C", "conv", "channel", lambda p: p["n_groups"] * p["d_state"], param("n_groups"),
                    "n_groups", replicable=True),
        RegionShape("ssm", "ssm", "head", param("num_heads"), param("num_heads"), "num_heads",
                    unit_elements=lambda p: p["head_dim"] * p["d_state"]),
    ),
    region_ids={"x": 1, "B": 2, "C": 3, "ssm": 7},
    colours={"x": "cyan", "B": "magenta", "C": "yellow", "ssm": "green"},
    generic_params={
        "intermediate_size": (("mamba_d_ssm",), ("mamba_num_heads", "mamba_head_dim"),
                              ("mamba_n_heads", "mamba_d_head"), ("mamba_expand", "hidden_size"),
                              ("expand", "hidden_size"), ("intermediate_size",)),
        "d_state": (("mamba_d_state",), ("ssm_state_size",), ("state_size",), ("d_state",)),
        "n_groups": (("mamba_n_groups",), ("mamba_ngroups",), ("n_groups",), ("ngroups",)),
        "num_heads": (("mamba_num_heads",), ("mamba_n_heads",), ("n_mamba_heads",), ("num_heads",)),
        "head_dim": (("mamba_head_dim",), ("mamba_d_head",), ("mamba_headdim",), ("head_dim",)),
    },
    generic_conv_kernel=(("mamba_d_conv",), ("conv_kernel",), ("d_conv",)),
    signature=("mamba_n_groups", "mamba_ngroups", "n_groups", "ngroups"),
    detect_rank=2,
)
