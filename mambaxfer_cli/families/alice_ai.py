"""AliceAI: KDA + gated full attention (vLLM's AliceAIForCausalLM, alice_ai.py); ``layer_types``
name each layer; the KDA layers are KimiGatedDeltaNetAttention, float32 whatever the flags."""

from mambaxfer_cli.families import Family
from mambaxfer_cli.planning.model import Variant

FAMILIES = (
    Family("AliceAI", ("alice_ai",), Variant("kda"),
           {"num_heads": (("linear_num_key_heads",),), "head_dim": (("linear_key_head_dim",),)},
           conv_kernel=(("linear_conv_kernel_dim",),), ssm_dtype_default="float32", ssm_dtype_fixed="always",
           order=12),
)
