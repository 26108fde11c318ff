"""Zaya (ZAYA1): a CCA state in every attention layer, as SGLang's ``configs/zaya.py`` ``ZayaConfig``
reads it: the layers ``zaya_layers`` marks ``"a"`` (else every even layer), the head counts from
the first non-zero ``cca_num_q_heads`` / ``num_query_groups_list`` entry, ``head_dim`` else
``kv_channels``, and the window of ``cca_time0 + cca_time1 - 2`` rows."""

from __future__ import annotations

from typing import Any, Mapping

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.families import Config, Family
from mambaxfer_cli.planning.model import Variant


def _first(config: Config, key: str, default: Any) -> Any:
    return next((v for v in config.get(key) or () if v), default)


def derived(config: Config, where: str) -> Mapping[str, Any]:
    layers = config.get("zaya_layers") or ["a" if i % 2 == 0 else 0 for i in range(config.get("num_hidden_layers", 80))]
    groups = _first(config, "num_query_groups_list", config.get("num_query_groups", 2))
    if groups != config.get("num_key_value_heads", 2):
        raise UserError(f"{where}: num_query_groups must equal num_key_value_heads for ZAYA1 checkpoints "
                        f"(ZayaConfig)")
    return {"layer_types": ["hybrid" if kind == "a" else "moe" for kind in layers],
            "cca.num_heads": _first(config, "cca_num_q_heads", config.get("num_attention_heads", 8)),
            "cca.head_dim": config.get("head_dim") or config.get("kv_channels"),
            "cca.conv_kernel": config.get("cca_time0", 2) + config.get("cca_time1", 2) - 1}


FAMILIES = (
    Family("Zaya", ("zaya",), Variant("cca"),
           {"num_heads": (("cca.num_heads",),), "num_kv_heads": (("num_key_value_heads",),),
            "head_dim": (("cca.head_dim",),), "hidden_size": (("hidden_size",),)},
           conv_kernel=(("cca.conv_kernel",),), ssm_dtype_keys=(), derived=derived, order=20),
)
