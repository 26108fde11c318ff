"""JetNemotron in SGLang: ``configs/jet_nemotron.py`` ``JetNemotronConfig.mamba2_cache_params`` is
``Mamba2StateShape.create`` with GDN's dims (``n_groups`` = ``num_heads`` key heads, ``head_v_dim``
values), no ``conv_shard_groups``, layers ``linear_layer_ids`` ("jet"); its ``JetBlock`` writes only
the last ``num_heads · head_v_dim`` conv rows and runs only at attention TP 1."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {"JetNemotron": FamilyRule(
    True, config_ssm_dtype=True, conv_shard_groups=False, note="configs/jet_nemotron.py JetNemotronConfig",
    whole_tp="SGLang's JetBlock (models/jet_nemotron.py) runs only at attention TP 1: at TP {tp} its forward "
             "splits each rank's 1/{tp} of qkvabz_proj by the whole model's sizes (RuntimeError in split)")}
# Conformance: its config class's state at each TP size, and JetBlock built per TP size.
CONFIG_STATES = {"JetNemotron": ("JetNemotronConfig state", "sglang.srt.configs.jet_nemotron", "JetNemotronConfig")}
TP_MIXERS = {"JetNemotron": ("JetBlock TP sizes", "sglang.srt.models.jet_nemotron", "JetBlock")}
