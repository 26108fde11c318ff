"""What the ranks of SGLang's transfer (``engines/sglang/transfer/run.py``) find and measure, as typed values."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any

from mambaxfer_cli.execute.results import Preparation, RankResult, Tally, Timing


@dataclass(frozen=True)
class FieldCount:
    """One D rank's items of one field, all layers: bytes wrong (written with other bytes), missing
    (never written) and written beyond the item (into another slot), as ``check`` counts them."""

    field: str
    layers: int
    item_bytes: int       # one layer's item
    wrong: int = 0
    missing: int = 0
    beyond: int = 0

    @property
    def bad(self) -> int:
        return self.wrong + self.missing + self.beyond


@dataclass(frozen=True)
class FirstWrong:
    """The first bad byte of a D rank's request slot, located, with what the last round found."""

    field: str
    layer_id: int
    offset: int
    holds: str            # what D keeps there: region, unit and byte
    expected: int
    found: int
    kind: str             # wrong, missing

    def describe(self, d_rank: int) -> str:
        return (f"D{d_rank} {self.field} layer {self.layer_id} byte {self.offset} = {self.holds}: "
                f"{self.kind}, expected 0x{self.expected:02x}, found 0x{self.found:02x}")


@dataclass(frozen=True)
class SlotDecodeResult(RankResult):
    d_rank: int
    writers: tuple[int, ...]
    entries: int
    checked_bytes: int                 # every byte of every entry, every round
    fields: tuple[FieldCount, ...]
    first: FirstWrong | None
    verify_s: float

    @property
    def bad(self) -> int:
        return sum(f.bad for f in self.fields)

    @property
    def ok(self) -> bool:
        return self.bad == 0

    def to_dict(self) -> dict[str, Any]:
        return {"d_rank": self.d_rank, "writers": list(self.writers), "entries": self.entries,
                "checked_bytes": self.checked_bytes, "ok": self.ok, "bad_bytes": self.bad,
                "fields": [asdict(f) for f in self.fields],
                "first_bad_byte": None if self.first is None else {**asdict(self.first),
                                                                   "description": self.first.describe(self.d_rank)},
                "verify_s": self.verify_s}


@dataclass(frozen=True)
class WriteTiming:
    """One P rank's WRITE to one D rank: its descriptors, bytes, and per round its time."""

    d_rank: int
    descriptors: int
    descriptors_merged: int       # after NIXL merged pairs adjacent on both sides
    bytes: int
    times_s: tuple[float, ...]

    @property
    def time_s(self) -> float:
        return statistics.median(self.times_s)


@dataclass(frozen=True)
class SlotPrefillResult(RankResult):
    p_rank: int
    fill_s: float
    prepare_s: float
    writes: tuple[WriteTiming, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"p_rank": self.p_rank, "fill_s": self.fill_s, "prepare_s": self.prepare_s,
                "writes": [{"d_rank": w.d_rank, "descriptors": w.descriptors,
                            "descriptors_merged": w.descriptors_merged, "bytes": w.bytes, "time_s": w.time_s,
                            "times_s": list(w.times_s)} for w in self.writes]}


@dataclass(frozen=True)
class SlotBenchResult(RankResult):
    role: str
    rank: int
    timings: dict[str, Timing]             # a P rank's, by variant
    preparations: dict[str, Preparation]   # a P rank's, by variant
    checks: dict[str, Tally]               # a D rank's, by variant
