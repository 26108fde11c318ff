"""Zaya in SGLang: ``configs/zaya.py`` ``ZayaConfig.mamba2_cache_params`` keeps two conv tensors per
CCA layer, ``((num_attention_heads + num_key_value_heads) · head_dim / TP, cca_time0 + cca_time1 - 2)``
(each rank its query heads then its key heads, ``CCA._install_tp_weight_loaders``) and the previous
hidden state ``(hidden_size, 1)`` whole on every rank, an empty temporal ``(1, 1, 0)`` and no
``conv_shard_groups``; the layers are the attention layers (``linear_layer_ids``), which also keep K and V."""
from __future__ import annotations

from typing import TYPE_CHECKING

from mambaxfer_cli.engines.sglang.families import FamilyRule
from mambaxfer_cli.planning.model import ModelSpec

if TYPE_CHECKING:
    from mambaxfer_cli.engines.sglang.shapes import StateShape

SGLANG_0_5_23 = {"Zaya": FamilyRule(True, note="configs/zaya.py ZayaConfig", conv_shard_groups=False)}
FIELD_LABELS = {"prev_hs": "prev hidden"}
CONFIG_STATES = {"Zaya": ("ZayaConfig state", "sglang.srt.configs.zaya", "ZayaConfig")}


def _state_shape(model: ModelSpec, tp: int) -> StateShape:
    from mambaxfer_cli.engines.sglang.shapes import StateShape, divide    # shapes reads this package's rows

    p = model.params
    channels = (p["num_heads"] + p["num_kv_heads"]) * p["head_dim"]
    return StateShape(conv=(divide(channels, tp, "the CCA channels"), model.conv_kernel - 1),
                      temporal=(1, 1, 0), conv_dim_full=channels, extra=(("prev_hs", p["hidden_size"], 1),))


def _tp_refusal(model: ModelSpec, tp: int) -> str | None:
    p = model.params
    if p["num_heads"] % tp:
        return f"num_q_heads ({p['num_heads']}) must be divisible by tp_size ({tp}) for ZAYA1 head-parallel CCA"
    if p["num_kv_heads"] % tp:
        return (f"num_k_heads ({p['num_kv_heads']}) must be divisible by tp_size ({tp}); KV-replication TP "
                f"is not supported for ZAYA1")
    return None


# configs/zaya.py's state shape (shapes.state_shape) and models/zaya.py CCA's asserts (shapes.tp_refusal).
STATE_SHAPES = {"Zaya": _state_shape}
TP_REFUSALS = {"Zaya": _tp_refusal}
