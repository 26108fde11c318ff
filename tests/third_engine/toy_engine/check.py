"""The toy's proof: P's slots filled with the pattern, D's poisoned, the plan's writes applied in
numpy, every D byte compared with what it must hold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mambaxfer_cli.planning.layout import RankLayout
from mambaxfer_cli.proof.pattern import POISON
from toy_engine.plan import D_SLOT, D_SLOTS, P_SLOT, P_SLOTS, ToyPlan, pattern


@dataclass(frozen=True)
class Proof:
    pairing: str
    writes: int
    checked: int                    # D bytes compared
    wrong: int

    @property
    def right(self) -> bool:
        return self.wrong == 0

    def to_dict(self) -> dict[str, Any]:
        return {"pairing": self.pairing, "writes": self.writes, "bytes_checked": self.checked,
                "wrong_bytes": self.wrong, "verified": self.right}


def expected(whole: RankLayout, layer: int) -> np.ndarray:
    """What a D rank's region of ``layer`` (``whole``: one layer's state) must hold after the request moved."""
    want = np.full((D_SLOTS, whole.state_bytes), POISON, dtype=np.uint8)
    want[D_SLOT] = pattern(whole, layer, P_SLOT)
    return want


def prove(plan: ToyPlan) -> Proof:
    source = [np.stack([pattern(plan.whole, layer, s) for s in range(P_SLOTS)]).reshape(-1)
              for layer in range(plan.layers)]          # every P rank holds the same: the whole state
    checked = wrong = 0
    for d in range(plan.d_tp):
        got = [np.full(D_SLOTS * plan.state_bytes, POISON, dtype=np.uint8) for _ in range(plan.layers)]
        for w in (w for w in plan.writes if w.d_rank == d):
            got[w.layer][w.dst_offset:w.dst_offset + w.length] = source[w.layer][w.src_offset:w.src_offset + w.length]
        for layer in range(plan.layers):
            wrong += int(np.count_nonzero(got[layer] != expected(plan.whole, layer).reshape(-1)))
            checked += got[layer].size
    return Proof(f"{plan.p_tp}:{plan.d_tp}", len(plan.writes), checked, wrong)
