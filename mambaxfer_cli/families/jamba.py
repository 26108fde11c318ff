"""Jamba: Mamba1 layers beside attention (``attn_layer_period`` / ``attn_layer_offset``)."""

from mambaxfer_cli.families import Family
from mambaxfer_cli.planning.model import Variant

FAMILIES = (
    Family("Jamba", ("jamba",), Variant("mamba1"),
           {"intermediate_size": (("mamba_expand", "hidden_size"),),
            "d_state": (("mamba_d_state",),)},
           conv_kernel=(("mamba_d_conv",),), order=1),
)
NO_EAGLE3 = ("JambaForCausalLM",)    # vLLM's class lacks SupportsEagle3
