"""Mamba and Mamba2 (Hugging Face's, Codestral's): every layer an SSM layer."""

from mambaxfer_cli.families import Family
from mambaxfer_cli.planning.model import Variant

MAMBA1_HF = {
    "intermediate_size": (("intermediate_size",), ("d_inner",), ("expand", "hidden_size")),
    "d_state": (("state_size",), ("d_state",)),
}

FAMILIES = (
    Family("Mamba (HF)", ("mamba",), Variant("mamba1"), MAMBA1_HF,
           conv_kernel=(("conv_kernel",), ("d_conv",)), layers="all_ssm", order=2),
    Family("Mamba2", ("mamba2",), Variant("mamba2"),
           {"intermediate_size": (("expand", "hidden_size"), ("intermediate_size",)),
            "d_state": (("state_size",), ("d_state",)),
            "n_groups": (("n_groups",), ("ngroups",)),
            "num_heads": (("num_heads",),),
            "head_dim": (("head_dim",),)},
           conv_kernel=(("conv_kernel",), ("d_conv",)), layers="all_ssm", order=4),
)
NO_EAGLE3 = ("MambaForCausalLM", "Mamba2ForCausalLM")    # vLLM's class lacks SupportsEagle3
