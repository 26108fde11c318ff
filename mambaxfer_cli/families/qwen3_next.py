"""Qwen3-Next and Qwen3.5: Gated DeltaNet (GDN) layers beside full attention."""

from mambaxfer_cli.families import Family
from mambaxfer_cli.planning.model import ATTENTION, Variant

GDN_KEYS = {"num_k_heads": (("linear_num_key_heads",),),
            "num_v_heads": (("linear_num_value_heads",),),
            "head_k_dim": (("linear_key_head_dim",),),
            "head_v_dim": (("linear_value_head_dim",),)}

# The key that counts the MTP layers: Qwen3.5's mtp_num_hidden_layers (under text_config), Qwen3-Next's
# num_nextn_predict_layers (its released configs leave it out). Each MTP layer is a full-attention
# decoder layer.
MTP_KEYS = {"qwen3_next": "num_nextn_predict_layers",
            **{t: "mtp_num_hidden_layers" for t in ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")}}

FAMILIES = (
    Family("Qwen3-Next / Qwen3.5", ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe",
                                    "qwen3_5_moe_text"), Variant("gdn"), GDN_KEYS,
           conv_kernel=(("linear_conv_kernel_dim",),), ssm_dtype_keys=("mamba_ssm_dtype",), order=9,
           mtp_keys=MTP_KEYS, mtp_kind=ATTENTION),
)
ARCHITECTURE_LABELS = {"ColQwen3_5": ("ColQwen3.5", "gdn")}
