"""Granite-4.0-H and Bamba: Mamba2 layers beside attention, under the same keys."""

from mambaxfer_cli.families import Family
from mambaxfer_cli.planning.model import Variant

FAMILIES = (
    Family("Granite-4.0-H / Bamba", ("granitemoehybrid", "bamba"), Variant("mamba2"),
           {"intermediate_size": (("mamba_expand", "hidden_size"),),
            "d_state": (("mamba_d_state",),),
            "n_groups": (("mamba_n_groups",),),
            "num_heads": (("mamba_n_heads",),),
            "head_dim": (("mamba_d_head",),)},
           conv_kernel=(("mamba_d_conv",),), order=6),
)
# transformers 5.20's BambaConfig.layers_block_type (its layer_types): "linear_attention" off attn_layer_indices.
TRANSFORMERS_BACKEND = {"BambaForCausalLM": "linear_attention"}
NO_EAGLE3 = ("GraniteMoeHybridForCausalLM",)    # vLLM's class lacks SupportsEagle3
