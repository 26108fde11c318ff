"""Zamba2: Mamba2 layers with shared attention blocks."""

from mambaxfer_cli.families import Family
from mambaxfer_cli.planning.model import Variant

FAMILIES = (
    Family("Zamba2", ("zamba2",), Variant("mamba2"),
           {"intermediate_size": (("mamba_expand", "hidden_size"),),
            "d_state": (("mamba_d_state",),),
            "n_groups": (("mamba_ngroups",),),
            "num_heads": (("n_mamba_heads",),),
            "head_dim": (("mamba_headdim",),)},
           conv_kernel=(("mamba_d_conv",),), order=8),
)
NO_EAGLE3 = ("Zamba2ForCausalLM",)    # vLLM's class lacks SupportsEagle3
