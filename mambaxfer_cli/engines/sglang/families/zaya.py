"""Zaya in SGLang: ``configs/zaya.py`` ``ZayaConfig.mamba2_cache_params`` keeps two conv tensors per
CCA layer, ``((num_attention_heads + num_key_value_heads) · head_dim / TP, cca_time0 + cca_time1 - 2)``
(each rank its query heads then its key heads, ``CCA._install_tp_weight_loaders``) and the previous
hidden state ``(hidden_size, 1)`` whole on every rank, an empty temporal ``(1, 1, 0)`` and no
``conv_shard_groups``; the layers are the attention layers (``linear_layer_ids``), which also keep K and V."""
from mambaxfer_cli.engines.sglang.families import FamilyRule
SGLANG_0_5_23 = {"Zaya": FamilyRule(True, note="configs/zaya.py ZayaConfig", conv_shard_groups=False)}
FIELD_LABELS = {"prev_hs": "prev hidden"}
CONFIG_STATES = {"Zaya": ("ZayaConfig state", "sglang.srt.configs.zaya", "ZayaConfig")}
