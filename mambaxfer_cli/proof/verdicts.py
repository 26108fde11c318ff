"""What both engines' ``check`` share: the P:D pairings asked for, and vLLM's answers."""

from __future__ import annotations

import re
from dataclasses import dataclass

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.limits import MAX_TP

ALL_PRESETS_MAX_TP = 8
# What vLLM does with a pairing: moves the right bytes, corrupts some, or refuses it.
RIGHT, CORRUPTS, REFUSES = "right-bytes", "corrupts", "refuses"


@dataclass(frozen=True)
class Pairing:
    p_tp: int
    d_tp: int

    def __str__(self) -> str:
        return f"{self.p_tp}:{self.d_tp}"


def parse_pairs(text: str) -> tuple[Pairing, ...]:
    """``--pairs 1:4,4:1,2:3``: P:D TP sizes, comma-separated, in the order given."""
    pairs: list[Pairing] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        sides = item.split(":")
        try:
            if len(sides) != 2:
                raise ValueError
            pairing = Pairing(int(sides[0]), int(sides[1]))
        except ValueError:
            counts = re.fullmatch(r"(\d+)[Pp](\d+)[Dd]", item)     # xPyD: instance counts to a deployer
            hint = (f" ('{item}' reads as instance counts; for P TP {counts[1]} → D TP {counts[2]} write "
                    f"{counts[1]}:{counts[2]})" if counts else "")
            raise UserError(f"--pairs: '{item}' is not a P:D pair of TP sizes{hint}; write e.g. "
                            f"--pairs 1:4,4:1,2:3") from None
        if pairing.p_tp < 1 or pairing.d_tp < 1:
            raise UserError(f"--pairs: '{item}': TP sizes must be positive integers")
        if max(pairing.p_tp, pairing.d_tp) > MAX_TP:
            raise UserError(f"--pairs: '{item}': TP sizes are at most {MAX_TP}")
        if pairing not in pairs:
            pairs.append(pairing)
    if not pairs:
        raise UserError("--pairs: give at least one P:D pair, e.g. --pairs 1:4,4:1,2:3")
    return tuple(pairs)
