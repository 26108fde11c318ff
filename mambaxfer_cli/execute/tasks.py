"""What every engine's run shares (pure): its settings, a rank's task and memory, ``--layers``."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace
from typing import Any

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.execute.discovery import Discovery
from mambaxfer_cli.planning.layout import RankLayout
from mambaxfer_cli.planning.model import ModelSpec


@dataclass(frozen=True)
class Memory:
    """The regions one rank registers: one per KV-cache tensor."""

    tensors: int
    logical_blocks: int
    page_bytes: int
    single_region: bool = False    # bench: the tensors back to back in one registered region
    side_regions: tuple[tuple[int, int], ...] = ()   # Qwen4Exp: (regions, page bytes) of each set of
                                                     # whole pages after the tensors, one region per layer

    @property
    def side_page_bytes(self) -> tuple[int, ...]:
        return tuple(page for _, page in self.side_regions)

    @property
    def region_shapes(self) -> tuple[tuple[int, int], ...]:
        """(pages, bytes per page) of each region."""
        return (((self.logical_blocks, self.page_bytes),) * self.tensors
                + tuple((self.logical_blocks, page) for regions, page in self.side_regions for _ in range(regions)))

    @property
    def total_bytes(self) -> int:
        return sum(rows * cols for rows, cols in self.region_shapes)


@dataclass(frozen=True)
class RunSettings:
    run_id: str
    device: str            # "cpu" (DRAM) or "cuda" (VRAM)
    gpus: int              # visible GPUs with --device cuda, else 0
    host: str
    port: int              # P rank r's side channel listens on port + r; 0: any free port
    iters: int
    discovery: Discovery | None = None     # a two-host run: this side's role and how it finds the other
    geometry: dict[str, Any] | None = None   # what the two sides compare before any byte moves
    bench: object | None = None            # a bench run: what its ranks need (an engine's bench spec)

    @property
    def mem_type(self) -> str:
        return "VRAM" if self.device == "cuda" else "DRAM"

    def dev(self, index: int) -> int:
        """The GPU of the ``index``-th rank started here, round robin (0 for DRAM)."""
        return index % self.gpus if self.device == "cuda" else 0


@dataclass(frozen=True)
class RankTask:
    """What one rank process does: its role and rank, its memory and layout, the run's settings."""

    role: str              # "P" or "D"
    rank: int
    settings: RunSettings
    dev_id: int            # GPU index for VRAM, 0 for DRAM
    layout: RankLayout
    memory: Memory

    @property
    def name(self) -> str:
        return f"{self.role}{self.rank}"

    @property
    def agent(self) -> str:
        return f"mambaxfer-{self.settings.run_id}-{self.name}"

    @property
    def port(self) -> int:
        """Its side channel on one host: --port + rank (0: a free port)."""
        return self.settings.port + self.rank if self.settings.port else 0

    @property
    def program(self) -> str:
        """The rank's program, as ``module:function`` (the function takes the task and its channel)."""
        raise NotImplementedError


def unexecutable(message: str) -> UserError:
    return UserError(f"this plan cannot be executed: {message}")


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def available_memory() -> int | None:
    with contextlib.suppress(OSError), open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def cut_layers(spec: ModelSpec, layers: int | None) -> ModelSpec:
    """The model's first ``layers`` cache-keeping layers (fewer KV-cache tensors, less memory), and
    its draft layers, which the engine keeps whatever the cut."""
    if layers is None:
        return spec
    if layers < 1:
        raise UserError("--layers must be >= 1")
    target = len(spec.layers) - spec.draft_layers
    cut = spec.layers[:min(layers, target)]
    if "ssm" not in cut:
        raise UserError(f"--layers {layers}: the first {layers} cache-keeping layers of {spec.name} hold no SSM "
                        f"layer ({', '.join(cut)}); take more layers")
    return replace(spec, layers=cut + spec.layers[target:], layer_ids=spec.layer_ids[:layers])
