"""Lightning attention (MiniCPM-SALA): no conv state, a ``head_dim × head_dim`` state per KV head."""

from mambaxfer_cli.planning.variants import RegionShape, VariantRules, param

VARIANT = VariantRules(
    name="lightning", title="lightning attention", order=6,
    regions=(RegionShape("ssm", "ssm", "head", param("num_heads"), param("num_heads"), "num_heads",
                         unit_elements=lambda p: p["head_dim"] * p["head_dim"]),),
    region_ids={"ssm": 7}, colours={"ssm": "green"}, speculative_rows=False,
    generic_params={"num_heads": (("lightning_nkv",),), "head_dim": (("lightning_head_dim",),)},
    backend="LINEAR",
)
