"""The model variants mambaxfer knows: one module each in this package, found by name, filling
one ``VariantRules`` (its ``VARIANT``); nothing else names a variant.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable, Mapping

Params = Mapping[str, int]
Alternatives = tuple[tuple[str, ...], ...]    # config keys tried in order; each a product of keys


@dataclass(frozen=True)
class RegionShape:
    """A region of the per-request state in global units, sharded in whole groups of ``units/groups``; a
    replicable one of a single group is whole on every rank (vLLM pads Mamba2 B/C groups to ``n_eff = T``)."""

    name: str
    kind: str                              # "conv" | "ssm"
    unit: str                              # "channel" | "head"
    units: Callable[[Params], int]
    groups: Callable[[Params], int]
    dim: str
    unit_elements: Callable[[Params], int] | None = None   # temporal units only
    replicable: bool = False
    rows: Callable[[Params], int] | None = None   # a conv window of its own rows, in a tensor of its own


@dataclass(frozen=True)
class VariantRules:
    """One variant, whole."""

    name: str                              # "mamba2": what --variant and every document say
    title: str                             # "Mamba2": how prose names it
    order: int                             # where it is listed among the variants
    regions: tuple[RegionShape, ...]       # its state's regions, conv ones first
    region_ids: Mapping[str, int]          # each region's ID in the proof's byte pattern (1..15, not 8..12)
    colours: Mapping[str, str]             # each region's colour in tables
    speculative_rows: bool = True          # its conv state keeps a row per speculative token
    generic_params: Mapping[str, Alternatives] = field(default_factory=dict)   # an unknown family's keys
    generic_conv_kernel: Alternatives = ()
    ssm_dtype_keys: tuple[str, ...] = ()
    signature: tuple[str, ...] = ()        # config keys whose presence says a config is of this variant
    detect_rank: int = 0                   # signatures are tried lowest rank first (most specific)
    backend: str = ""                      # vLLM's backend of its layers ("": NAME_ATTN)


def param(name: str) -> Callable[[Params], int]:
    """A dimension that is one param."""
    return lambda p: p[name]


_FOUND = [importlib.import_module(f"{__name__}.{info.name}").VARIANT for info in pkgutil.iter_modules(__path__)
          if not info.ispkg and not info.name.startswith("_")]
VARIANTS: Mapping[str, VariantRules] = {v.name: v for v in sorted(_FOUND, key=lambda v: (v.order, v.name))}
REGION_IDS: Mapping[str, int] = {region: number for v in VARIANTS.values() for region, number in v.region_ids.items()}
REGION_COLOURS: Mapping[str, str] = {region: colour for v in VARIANTS.values() for region, colour in v.colours.items()}


def names() -> tuple[str, ...]:
    """The variants, in their listed order: ``mamba1``, ``mamba2``, ``gdn``, ``kda``."""
    return tuple(VARIANTS)


def titles() -> str:
    """For prose: ``Mamba1, Mamba2 and GDN``."""
    listed = [v.title for v in VARIANTS.values()]
    return " and ".join((", ".join(listed[:-1]), listed[-1])) if len(listed) > 1 else listed[0]
