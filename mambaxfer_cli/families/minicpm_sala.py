"""MiniCPM-SALA: lightning-attention layers beside InfLLM-v2 sparse attention, as SGLang's
``configs/minicpm.py`` ``MiniCPMHybridConfig`` reads ``mixer_types`` (its aliases, repeated to
``num_hidden_layers``) and ``lightning_nkv``/``lightning_head_dim`` (defaults: ``num_key_value_heads``,
``head_dim``). No vLLM release serves it."""

from __future__ import annotations

from typing import Any, Mapping

from mambaxfer_cli.errors import UserError, quoted
from mambaxfer_cli.families import Config, Family, list_key
from mambaxfer_cli.planning.model import ATTENTION, SSM, Variant

_KINDS = {**dict.fromkeys(("minicpm4", "minicpm", "standard", "attention", "attn"), ATTENTION),
          **dict.fromkeys(("lightning", "lightning_attn", "lightning-attn"), SSM)}


def layer_kinds(config: Config, n_layers: int | None, where: str) -> tuple[str, ...]:
    kinds = list_key(config, "mixer_types", str, where) if config.get("mixer_types") else ["minicpm4"]
    if set(kinds) - set(_KINDS):
        raise UserError(f"{where}: Unsupported mixer type: {quoted(sorted(set(kinds) - set(_KINDS))[0])} "
                        f"(MiniCPMHybridConfig)")
    n = len(kinds) if n_layers is None else n_layers
    if len(kinds) > n:
        raise UserError(f"{where}: Invalid number of mixer types: {len(kinds)} (MiniCPMHybridConfig)")
    return tuple(_KINDS[kind] for kind in (kinds * n)[:n])


def derived(config: Config, where: str) -> Mapping[str, Any]:
    """The lightning dims with ``MiniCPMHybridConfig``'s defaults, and its conv kernel of 1."""
    nh = config.get("lightning_nh", config.get("num_attention_heads"))
    nkv = config.get("lightning_nkv", config.get("num_key_value_heads"))
    if nh != nkv:
        raise UserError(f"{where}: MiniCPM Lightning attention requires equal query and KV head counts because "
                        f"the seg_la backend does not support GQA: lightning_nh={nh}, lightning_nkv={nkv} "
                        f"(MiniCPMHybridConfig)")
    return {"lightning.nkv": nkv, "lightning.head_dim": config.get("lightning_head_dim", config.get("head_dim")),
            "lightning.conv_kernel": 1}


FAMILIES = (
    Family("MiniCPM-SALA", ("minicpm_sala",), Variant("lightning"),
           {"num_heads": (("lightning.nkv",),), "head_dim": (("lightning.head_dim",),)},
           conv_kernel=(("lightning.conv_kernel",),), ssm_dtype_keys=(), layer_kinds=layer_kinds,
           derived=derived, order=19),
)
