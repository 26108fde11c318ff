"""The model families mambaxfer reads: one module each in this package, found by name.

A family's module gives its ``FAMILIES`` (the config keys of its dimensions, its layer kinds, its
state dtype rules, the hooks that read what only it has) and, where it has them, the architectures
it labels. A dimension is a list of alternatives tried in
order; each alternative is a tuple of keys whose values multiply (``("mamba_expand", "hidden_size")``).
Nothing outside a family's modules names it: the readers and engines ask the ``Family``.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from mambaxfer_cli.errors import UserError, quoted
from mambaxfer_cli.limits import MAX_DIM, within
from mambaxfer_cli.planning.model import Variant
from mambaxfer_cli.planning.variants import VARIANTS, Alternatives

Config = Mapping[str, Any]
# (config, its layer count or None, where) -> the layer kinds, or None to read the layer-kind keys
LayerHook = Callable[[Config, "int | None", str], "tuple[str, ...] | None"]
# (config, layer kinds, where, --attention-config's indexer_kv_dtype) -> ModelSpec fields
PartsHook = Callable[[Config, "tuple[str, ...]", str, "str | None"], Mapping[str, Any]]


@dataclass(frozen=True)
class Family:
    label: str
    model_types: tuple[str, ...]
    variant: Variant
    params: Mapping[str, Alternatives]
    conv_kernel: Alternatives
    order: int = 0                    # where it is listed among the families
    layers: str = "keys"              # "keys": read the layer-kind keys; "all_ssm"; "parallel"
    ssm_dtype_keys: tuple[str, ...] = ()
    ssm_dtype_default: str | None = None  # None: the conv dtype
    head_size_keys: tuple[str, ...] = ("head_dim",)  # attention head size; else hidden_size / heads
    mla: bool = False                 # its attention is MLA: one latent "head", replicated across TP
    ssm_dtype_fixed: str = ""         # "always": the SSM state is ssm_dtype_default whatever the flags;
                                      # "layer": the same, but --mamba-ssm-cache-dtype sizes the blocks
    fixed_state_source: str = ""      # under "layer": the function that fixes the state dtype
    layer_kinds: LayerHook | None = None             # its own layer schedule
    attention_kinds: tuple[str, ...] = ()            # layer_types entries that are attention layers
    parts: PartsHook | None = None                   # what only it keeps (ModelSpec fields)
    refine: Callable[["Family", Config], "Family"] | None = None   # the family as this config sets it
    derived: Callable[[Config, str], Config] | None = None   # keys its config class computes from others
    ssm_backend: str = ""             # its SSM layers' backend name, where not the variant's
    backend_state_note: str = ""      # why that backend's state dtype is the default ({dtype})
    # Its MTP (multi-token prediction) layers: the config key that counts them, by model_type, and
    # the layer kind each keeps (what an engine's drafter builds from the target's own checkpoint).
    mtp_keys: Mapping[str, str] = field(default_factory=dict)
    mtp_kind: str = ""
    mtp_pattern: str = ""             # the key of each MTP step's layer pattern ("*": mtp_kind, "E": no cache)


def int_key(config: Config, key: str, minimum: int, where: str) -> int:
    value = config[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"{where}: key '{key}' must be an integer >= {minimum}, got {quoted(value)}")
    return value


def dim_key(config: Config, key: str, default: int | None, where: str, minimum: int = 1) -> int:
    """A dimension's key, ``default`` where unset, bounded as any model's."""
    value = int_key({key: default if config.get(key) is None else config[key]}, key, minimum, where)
    return within(f"{where}: key '{key}'", value, minimum, MAX_DIM, "model's")


def list_key(config: Config, key: str, item: type, where: str) -> list:
    value = config[key]
    if not isinstance(value, list) or not all(isinstance(v, item) and not isinstance(v, bool) for v in value):
        items = {str: "strings", int: "integers"}[item]
        raise UserError(f"{where}: key '{key}' must be a list of {items}, got {quoted(value)}")
    return value


_MODULES = [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)
            if not info.ispkg and not info.name.startswith("_")]


def _merged(name: str) -> dict[str, Any]:
    return {key: value for module in _MODULES for key, value in getattr(module, name, {}).items()}


FAMILIES: tuple[Family, ...] = tuple(sorted((f for m in _MODULES for f in getattr(m, "FAMILIES", ())),
                                            key=lambda f: f.order))
# vLLM's served architectures whose language model is a family (under ``text_config``) or a
# variant's generic keys, by the name vLLM gives them, with the variant vLLM types their layers as
# (model_executor/models/registry.py and each class's ``get_mamba_state_shape_from_config``).
ARCHITECTURE_LABELS: Mapping[str, tuple[str, str]] = _merged("ARCHITECTURE_LABELS")
# Recurrent or linear-attention families that exist but are not a variant mambaxfer knows.
UNSUPPORTED: Mapping[str, str] = _merged("UNSUPPORTED")
# The family a generic message names for one of its parts, by the part (its module's LABELS).
LABELS: Mapping[str, str] = _merged("LABELS")
# layer_types entries that are attention layers in some family (beside the generic ones).
ATTENTION_KINDS: tuple[str, ...] = tuple(kind for f in FAMILIES for kind in f.attention_kinds)


def labelled(family: Family, architectures: Sequence[str]) -> Family:
    """The family under vLLM's name for the first architecture it names, where its variant is the
    one vLLM types the layers as (a generic guess it confirms is no longer a guess)."""
    for arch in architectures:
        if arch in ARCHITECTURE_LABELS:
            label, variant = ARCHITECTURE_LABELS[arch]
            if family.variant == variant:
                return replace(family, label=label, parts=None)   # what it keeps is read under its own name
    return family


# Used when the model_type is not in the table, or when --variant overrides detection: every
# name any family uses, most specific first (each variant's module lists them).
GENERIC: Mapping[str, Family] = {
    name: Family(f"generic {v.title} (guessed)", (), Variant(name), v.generic_params, conv_kernel=v.generic_conv_kernel,
                 ssm_dtype_keys=v.ssm_dtype_keys)
    for name, v in VARIANTS.items()
}

# Keys whose presence identifies a variant when the model_type is unknown, most specific first.
SIGNATURE_KEYS: tuple[tuple[Variant, tuple[str, ...]], ...] = tuple(
    (Variant(v.name), v.signature) for v in sorted(VARIANTS.values(), key=lambda v: v.detect_rank) if v.signature)


def family_for(model_type: str) -> Family | None:
    return next((family for family in FAMILIES if model_type in family.model_types), None)


def supported_summary() -> str:
    by_variant: dict[Variant, list[str]] = {}
    for family in FAMILIES:
        by_variant.setdefault(family.variant, []).extend(family.model_types)
    return "; ".join(f"{variant.value}: {', '.join(types)}" for variant, types in by_variant.items())
