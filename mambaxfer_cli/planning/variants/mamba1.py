"""Mamba1: conv channels ``x`` and one SSM state per channel, both sharded by channel."""

from mambaxfer_cli.planning.variants import RegionShape, VariantRules, param

_I = param("intermediate_size")

VARIANT = VariantRules(
    name="mamba1", title="Mamba1", order=1,
    regions=(
        RegionShape("x", "conv", "channel", _I, _I, "intermediate_size"),
        RegionShape("ssm", "ssm", "channel", _I, _I, "intermediate_size", unit_elements=param("d_state")),
    ),
    region_ids={"x": 1, "ssm": 7},
    colours={"x": "cyan", "ssm": "green"},
    speculative_rows=False,             # vLLM's Mamba1 conv state keeps no room for speculative tokens
    generic_params={
        "intermediate_size": (("mamba_d_ssm",), ("d_inner",), ("mamba_expand", "hidden_size"),
                              ("intermediate_size",), ("expand", "hidden_size")),
        "d_state": (("mamba_d_state",), ("ssm_state_size",), ("state_size",), ("d_state",)),
    },
    generic_conv_kernel=(("mamba_d_conv",), ("conv_kernel",), ("d_conv",)),
    signature=("mamba_d_state", "state_size", "ssm_state_size", "d_state"),
    detect_rank=3,
)
