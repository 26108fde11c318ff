"""What a rank process measured and found, as typed values: the coordinator collects them, the
execute and bench documents are made from them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from mambaxfer_cli.engines.vllm.transfer.verify import PageCheck
from mambaxfer_cli.execute.results import Preparation, RankResult, Tally, Timing


@dataclass(frozen=True)
class Served:
    """A consumer of a two-host P rank: the D rank, its agent, the notifications it sent."""

    d_rank: int
    agent: str
    notifications: int


@dataclass(frozen=True)
class PrefillResult(RankResult):
    p_rank: int
    fill_s: float
    consumers: tuple[int, ...]
    served: tuple[Served, ...] | None = None     # a two-host prefill side: who came and read


@dataclass(frozen=True)
class DecodeResult(RankResult):
    d_rank: int
    sources: tuple[int, ...]             # the P ranks it read from
    local_lists: tuple[str, ...]         # its local descriptor lists (base, split:N)
    bytes: int
    descriptors_posted: int
    descriptors_merged: int              # after NIXL merged pairs adjacent on both sides
    telemetry_bytes: int
    times_s: tuple[float, ...]           # one per iteration
    xfer_us: int
    prepare_s: float
    verify_s: float
    check: PageCheck
    ple_bytes: int = 0                   # Qwen4Exp's PLE pages, in bytes and descriptors above
    ple_descriptors: int = 0
    indexer_bytes: int = 0               # the indexer's ring and compressed-key pages (Qwen4Exp, GLM-5-Next)
    indexer_descriptors: int = 0

    @property
    def ok(self) -> bool:
        return self.check.ok

    @property
    def time_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def gb_per_s(self) -> float:
        return self.bytes / self.time_s / 1e9 if self.time_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        keys = ("d_rank", "sources", "local_lists", "bytes", "descriptors_posted", "descriptors_merged",
                "telemetry_bytes", "time_s", "times_s", "gb_per_s", "xfer_us", "prepare_s", "verify_s", "ple_bytes",
                "ple_descriptors", "indexer_bytes", "indexer_descriptors")
        values = {key: getattr(self, key) for key in keys}
        return {**{key: list(v) if isinstance(v, tuple) else v for key, v in values.items()},
                "verdict": self.check.to_dict()}


@dataclass(frozen=True)
class BenchResult(RankResult):
    role: str
    rank: int
    timings: dict[str, Timing] = field(default_factory=dict)            # step -> posts this rank initiated
    preparations: dict[str, Preparation] = field(default_factory=dict)  # variant -> its transfers here
    checks: dict[str, Tally] = field(default_factory=dict)              # step -> D's check after it
    ucx_lines: tuple[str, ...] = ()      # UCX's configuration line of each endpoint this rank used

