"""LFM2 (and its MoE and VL models): short-conv layers beside full attention, which vLLM's connector
refuses; LFM3: short conv that mambaxfer does not read.

The layers are transformers' ``Lfm2Config``'s: ``layer_types`` ("conv" or "full_attention"), else
``full_attn_idxs`` (attention there, conv elsewhere; every layer attention where both are unset)."""

from __future__ import annotations

from dataclasses import replace

from mambaxfer_cli.errors import UserError, quoted
from mambaxfer_cli.families import Config, Family, list_key
from mambaxfer_cli.planning.model import ATTENTION, SSM, Variant

_KINDS = {"conv": SSM, "short_conv": SSM, "full_attention": ATTENTION}


def layer_kinds(config: Config, n_layers: int | None, where: str) -> tuple[str, ...]:
    if "layer_types" in config:
        kinds = list_key(config, "layer_types", str, where)
        bad = sorted(set(kinds) - set(_KINDS))
        if bad:
            raise UserError(f"{where}: layer_types has unknown layer kinds {quoted(bad)}; known: {', '.join(_KINDS)}")
        return tuple(_KINDS[kind] for kind in kinds)
    if n_layers is None:
        raise UserError(f"{where}: missing key for the layer count: expected num_hidden_layers")
    attention = set(list_key(config, "full_attn_idxs", int, where)) if "full_attn_idxs" in config else None
    return tuple(ATTENTION if attention is None or i in attention else SSM for i in range(n_layers))


_LFM2 = Family("LFM2", ("lfm2",), Variant("short_conv"), {"hidden_size": (("hidden_size",),)},
               conv_kernel=(("conv_L_cache",),), layer_kinds=layer_kinds, order=15)
FAMILIES = (_LFM2, replace(_LFM2, label="LFM2-MoE", model_types=("lfm2_moe",), order=16),
            replace(_LFM2, label="LFM2-VL", model_types=("lfm2_vl",), order=17))
