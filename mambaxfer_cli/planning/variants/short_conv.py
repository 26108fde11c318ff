"""Short conv (LFM2): a conv window over ``hidden_size`` channels, no SSM state."""

from mambaxfer_cli.planning.variants import RegionShape, VariantRules, param

_H = param("hidden_size")

VARIANT = VariantRules(
    name="short_conv", title="short conv", order=5,
    regions=(RegionShape("x", "conv", "channel", _H, _H, "hidden_size"),),
    region_ids={"x": 1}, colours={"x": "cyan"},
    generic_params={"hidden_size": (("hidden_size",),)},
    generic_conv_kernel=(("conv_L_cache",),),
    backend="SHORT_CONV",
)
