"""JetNemotron, and JetVLM (whose text_config is one): JetBlock layers (a gated delta rule over
``num_heads`` heads of ``head_dim`` keys and ``int(head_dim · expand_v)`` values) beside attention, as
SGLang's ``configs/jet_nemotron.py`` reads ``efficient_attention_config["jet"]``; ``layer_types`` "jet"
is a JetBlock, "attn" and "swa" attention. No vLLM release serves it."""

from __future__ import annotations

import math
from typing import Any, Mapping

from mambaxfer_cli.errors import UserError, quoted
from mambaxfer_cli.families import Config, Family, list_key
from mambaxfer_cli.planning.model import ATTENTION, SSM, Variant

_KINDS = {"jet": SSM, "attn": ATTENTION, "swa": ATTENTION}


def layer_kinds(config: Config, n_layers: int | None, where: str) -> tuple[str, ...]:
    kinds = list_key(config, "layer_types", str, where) if "layer_types" in config else None
    if kinds is None or set(kinds) - set(_KINDS):
        raise UserError(f"{where}: layer_types must list {', '.join(_KINDS)} per layer, got {quoted(kinds)}")
    return tuple(_KINDS[kind] for kind in kinds)


def derived(config: Config, where: str) -> Mapping[str, Any]:
    """``efficient_attention_config.jet``'s keys as ``jet.<key>``, and ``jet.head_v_dim``:
    ``int(head_dim · expand_v)`` (``JetNemotronConfig.mamba2_cache_params``)."""
    blocks = config.get("efficient_attention_config")
    jet = blocks.get("jet") if isinstance(blocks, Mapping) else None
    if not isinstance(jet, Mapping):
        raise UserError(f"{where}: missing key efficient_attention_config.jet (the JetBlock dimensions)")
    head, expand = jet.get("head_dim"), jet.get("expand_v")
    keys = {f"jet.{k}": v for k, v in jet.items()}
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
           for v in (head, expand)):
        keys["jet.head_v_dim"] = int(head * expand)     # type: ignore[operator]
    return keys


FAMILIES = (
    Family("JetNemotron", ("jet_nemotron", "jet_vlm"), Variant("gdn"),
           {"num_k_heads": (("jet.num_heads",),), "num_v_heads": (("jet.num_heads",),),
            "head_k_dim": (("jet.head_dim",),), "head_v_dim": (("jet.head_v_dim",),)},
           conv_kernel=(("jet.conv_size",),), ssm_dtype_keys=("mamba_ssm_dtype",), head_size_keys=(),
           layer_kinds=layer_kinds, derived=derived, order=18),
)
