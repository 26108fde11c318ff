"""The base type of what rank programs return (each engine subclasses it), preparation times, and
a bench variant's timings and figures."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np


class RankResult:
    """What one rank's program returns; the coordinator hands it back as it came."""


class Checked:
    """A run's outcome over its D ranks' results: verified when every one's check passed."""

    decode: Sequence[Any]

    @property
    def verified(self) -> bool:
        return all(d.ok for d in self.decode)


@dataclass(frozen=True)
class Tally:
    """A check of D's memory, counted: bytes compared, bytes wrong."""

    checked_bytes: int
    wrong_bytes: int

    @property
    def ok(self) -> bool:
        return self.wrong_bytes == 0


@dataclass(frozen=True)
class Preparation:
    """What preparing one variant's transfers took on a rank."""

    prep_s: float                        # prep_xfer_dlist, local and remote lists
    make_s: float                        # make_prepped_xfer
    descriptors_posted: int


@dataclass(frozen=True)
class Timing:
    """An initiator's timed posts of one bench step: per iteration, its wall time and NIXL's telemetry."""

    times_s: tuple[float, ...]
    post_us: tuple[int, ...]
    xfer_us: tuple[int, ...]
    descriptors_kept: int                # after NIXL's merge (the last iteration's)


def p99(values: Sequence[float]) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), 99))


def summarise(steps: Sequence[tuple[Timing, Preparation]], nbytes: int, iters: int, per_descriptor: str,
              telemetry: bool = True) -> dict[str, Any]:
    """One bench variant from its initiators' figures (iteration i: the slowest initiator);
    ``telemetry``: NIXL's post and transfer times too."""
    times = [max(t.times_s[i] for t, _ in steps) for i in range(iters)]
    more: dict[str, Any] = {}
    if telemetry:
        post = [max(t.post_us[i] for t, _ in steps) for i in range(iters)]
        xfer = [max(t.xfer_us[i] for t, _ in steps) for i in range(iters)]
        more = {"post_us": {"median": statistics.median(post), "p99": p99(post)},
                "nixl_xfer_us": {"median": statistics.median(xfer), "p99": p99(xfer)}}
    posted, kept = sum(p.descriptors_posted for _, p in steps), sum(t.descriptors_kept for t, _ in steps)
    median, slow = statistics.median(times), p99(times)
    return {"bytes": nbytes, "descriptors_posted": posted, "descriptors_kept": kept,
            per_descriptor: nbytes // max(posted, 1),
            "time_us": {"median": median * 1e6, "p99": slow * 1e6},
            "gb_per_s": {"median": nbytes / median / 1e9 if median else 0.0,
                         "p99": nbytes / slow / 1e9 if slow else 0.0},
            "per_descriptor_us": median * 1e6 / max(posted, 1),
            "prep_ms": max(p.prep_s for _, p in steps) * 1e3, "make_ms": max(p.make_s for _, p in steps) * 1e3,
            **more, "times_s": times}
