"""Nemotron-H: Mamba2 layers named by ``hybrid_override_pattern``."""

from mambaxfer_cli.families import Family
from mambaxfer_cli.planning.model import ATTENTION, Variant

FAMILIES = (
    Family("Nemotron-H", ("nemotron_h",), Variant("mamba2"),
           {"intermediate_size": (("mamba_num_heads", "mamba_head_dim"),),
            "d_state": (("ssm_state_size",),),
            "n_groups": (("n_groups",),),
            "num_heads": (("mamba_num_heads",),),
            "head_dim": (("mamba_head_dim",),)},
           conv_kernel=(("conv_kernel",),), ssm_dtype_keys=("mamba_ssm_cache_dtype",),
           ssm_dtype_default="float32", head_size_keys=("attention_head_dim", "head_dim"), order=5,
           # NemotronHMultiTokenPredictor: one layer per character of mtp_hybrid_override_pattern per
           # step, "*" an attention decoder layer, "E" an MoE one (no cache).
           mtp_keys={"nemotron_h": "num_nextn_predict_layers"}, mtp_kind=ATTENTION,
           mtp_pattern="mtp_hybrid_override_pattern"),
)
ARCHITECTURE_LABELS = {"Nemotron3_5TranscribeForConditionalGeneration": ("Nemotron3.5-Transcribe", "mamba2")}
