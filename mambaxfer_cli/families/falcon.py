"""Falcon-Mamba (Mamba1, as Hugging Face's Mamba) and Falcon-H1 (an SSM and an attention block in
every layer)."""

from mambaxfer_cli.families import Family
from mambaxfer_cli.families.mamba import MAMBA1_HF
from mambaxfer_cli.planning.model import Variant

FAMILIES = (
    Family("Falcon-Mamba", ("falcon_mamba",), Variant("mamba1"), MAMBA1_HF,
           conv_kernel=(("conv_kernel",), ("d_conv",)), layers="all_ssm", order=3),
    Family("Falcon-H1", ("falcon_h1",), Variant("mamba2"),
           {"intermediate_size": (("mamba_d_ssm",), ("mamba_expand", "hidden_size")),
            "d_state": (("mamba_d_state",),),
            "n_groups": (("mamba_n_groups",),),
            "num_heads": (("mamba_n_heads",),),
            "head_dim": (("mamba_d_head",),)},
           conv_kernel=(("mamba_d_conv",),), layers="parallel", order=7),
)
NO_EAGLE3 = ("FalconH1ForCausalLM",)    # vLLM's class lacks SupportsEagle3
