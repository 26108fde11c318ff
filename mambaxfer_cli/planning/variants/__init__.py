"""One small description per variant: its sub-projections and its unit of sharding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from mambaxfer_cli.planning.model import Variant

Params = Mapping[str, int]


@dataclass(frozen=True)
class RegionShape:
    """A region of the per-request state, in global units, before sharding.

    Units are sharded in whole groups of ``units/groups``; ``dim`` names the dimension a TP size
    must divide. A replicable region with a single group is held whole by every rank
    (vLLM's padding of Mamba2 B/C groups to ``n_eff = T``).
    """

    name: str
    kind: str                              # "conv" | "ssm"
    unit: str                              # "channel" | "head"
    units: Callable[[Params], int]
    groups: Callable[[Params], int]
    dim: str
    unit_elements: Callable[[Params], int] | None = None   # temporal units only
    replicable: bool = False


def _p(name: str) -> Callable[[Params], int]:
    return lambda p: p[name]


_I = _p("intermediate_size")

VARIANTS: Mapping[Variant, tuple[RegionShape, ...]] = {
    Variant.MAMBA1: (
        RegionShape("x", "conv", "channel", _I, _I, "intermediate_size"),
        RegionShape("ssm", "ssm", "channel", _I, _I, "intermediate_size",
                    unit_elements=_p("d_state")),
    ),
    Variant.MAMBA2: (
        RegionShape("x", "conv", "channel", _I, _I, "intermediate_size"),
        RegionShape("B", "conv", "channel", lambda p: p["n_groups"] * p["d_state"], _p("n_groups"),
                    "n_groups", replicable=True),
        RegionShape("C", "conv", "channel", lambda p: p["n_groups"] * p["d_state"], _p("n_groups"),
                    "n_groups", replicable=True),
        RegionShape("ssm", "ssm", "head", _p("num_heads"), _p("num_heads"), "num_heads",
                    unit_elements=lambda p: p["head_dim"] * p["d_state"]),
    ),
    Variant.GDN: (
        RegionShape("Q", "conv", "channel", lambda p: p["num_k_heads"] * p["head_k_dim"],
                    _p("num_k_heads"), "num_k_heads"),
        RegionShape("K", "conv", "channel", lambda p: p["num_k_heads"] * p["head_k_dim"],
                    _p("num_k_heads"), "num_k_heads"),
        RegionShape("V", "conv", "channel", lambda p: p["num_v_heads"] * p["head_v_dim"],
                    _p("num_v_heads"), "num_v_heads"),
        RegionShape("ssm", "ssm", "head", _p("num_v_heads"), _p("num_v_heads"), "num_v_heads",
                    unit_elements=lambda p: p["head_v_dim"] * p["head_k_dim"]),
    ),
}

REQUIRED_PARAMS: Mapping[Variant, tuple[str, ...]] = {
    Variant.MAMBA1: ("intermediate_size", "d_state"),
    Variant.MAMBA2: ("intermediate_size", "d_state", "n_groups", "num_heads", "head_dim"),
    Variant.GDN: ("num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim"),
}
