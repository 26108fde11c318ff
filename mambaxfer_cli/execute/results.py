"""The base type of what rank programs return (each engine subclasses it), and preparation times."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


class RankResult:
    """What one rank's program returns; the coordinator hands it back as it came."""


class Checked:
    """A run's outcome over its D ranks' results: verified when every one's check passed."""

    decode: Sequence[Any]

    @property
    def verified(self) -> bool:
        return all(d.ok for d in self.decode)


@dataclass(frozen=True)
class Preparation:
    """What preparing one variant's transfers took on a rank."""

    prep_s: float                        # prep_xfer_dlist, local and remote lists
    make_s: float                        # make_prepped_xfer
    descriptors_posted: int
