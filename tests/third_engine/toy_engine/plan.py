"""The toy's plan: every layer's whole state on every rank of both sides (replicated, whatever the
TP), so D rank d gets each layer in one WRITE from P rank d mod P's TP."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from mambaxfer_cli.planning.layout import RankLayout, rank_layout
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.proof.pattern import unit_bytes_pattern

FAULT_ENV = "TOY_ENGINE_FAULT"      # "layer:N": the toy writes layer N SHIFT bytes early (a planted fault)
SHIFT = 8
P_SLOTS, P_SLOT = 2, 1              # the request's slot on P, with a slot before it
D_SLOTS, D_SLOT = 3, 1              # and on D, with a slot on either side (a stray byte lands there)


@dataclass(frozen=True)
class Write:
    """One WRITE: a layer's whole state from a P rank's slot into a D rank's."""

    p_rank: int
    d_rank: int
    layer: int                      # among the model's SSM layers
    src_offset: int                 # bytes into the layer's region on each side
    dst_offset: int
    length: int

    def to_dict(self) -> dict[str, int]:
        return {"p_rank": self.p_rank, "d_rank": self.d_rank, "layer": self.layer, "src_offset": self.src_offset,
                "dst_offset": self.dst_offset, "length": self.length}


@dataclass(frozen=True)
class ToyPlan:
    model: ModelSpec
    p_tp: int
    d_tp: int
    whole: RankLayout               # one layer's whole state (TP 1's layout)
    writes: tuple[Write, ...]

    @property
    def state_bytes(self) -> int:
        return self.whole.state_bytes

    @property
    def layers(self) -> int:
        return self.model.ssm_layers

    @property
    def bytes_moved(self) -> int:
        return sum(w.length for w in self.writes)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": "toy", "model": self.model.name, "p_tp": self.p_tp, "d_tp": self.d_tp,
                "layers": self.layers, "state_bytes": self.state_bytes, "bytes_moved": self.bytes_moved,
                "writes": [w.to_dict() for w in self.writes]}


def faulty_layer() -> int | None:
    spec = os.environ.get(FAULT_ENV, "")
    return int(spec.split(":", 1)[1]) if spec.startswith("layer:") else None


def plan(model: ModelSpec, p_tp: int, d_tp: int) -> ToyPlan:
    whole = rank_layout(model, 1, 0)
    size, bad = whole.state_bytes, faulty_layer()
    writes = tuple(Write(d % p_tp, d, layer, P_SLOT * size, D_SLOT * size - (SHIFT if layer == bad else 0), size)
                   for d in range(d_tp) for layer in range(model.ssm_layers))
    return ToyPlan(model, p_tp, d_tp, whole, writes)


def pattern(whole: RankLayout, layer: int, slot: int) -> np.ndarray:
    """What a P slot of a layer holds: the core's pattern of every unit of the whole state."""
    return np.concatenate([unit_bytes_pattern(layer, slot, r.name, r.shard.start, len(r.shard), r.unit_bytes)
                           .reshape(-1) for r in whole.regions])
