"""Compact text for long ID lists: arithmetic runs as ``first..last step s``."""

from __future__ import annotations

from typing import Sequence


def runs(values: Sequence[int], min_run: int = 3) -> list[str]:
    """Greedy arithmetic runs: ``[1,2,3,4,9] -> ['1..4', '9']``; short runs stay as numbers."""
    values = [int(v) for v in values]
    out, i = [], 0
    while i < len(values):
        j = i + 1
        if j < len(values):
            step = values[j] - values[i]
            while j + 1 < len(values) and values[j + 1] - values[j] == step:
                j += 1
            if j - i + 1 >= min_run and step != 0:
                suffix = "" if step == 1 else f" step {step}"
                out.append(f"{values[i]}..{values[j]}{suffix}")
                i = j + 1
                continue
        out.append(str(values[i]))
        i += 1
    return out


def compact(values: Sequence[int], limit: int = 6) -> str:
    parts = runs(values)
    if len(parts) > limit:
        return ", ".join(parts[:limit]) + f", … ({len(parts) - limit} more runs)"
    return ", ".join(parts)
