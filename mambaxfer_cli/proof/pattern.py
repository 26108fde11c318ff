"""The byte pattern P pages are filled with: a pure function of (layer, block, region, global
unit, byte), so replicas agree and any misplaced byte differs from what D expects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from mambaxfer_cli.planning.variants import REGION_IDS as VARIANT_REGION_IDS

# Each region's ID in the pattern: the variants' own (1..7, and 13), then attention's KV, padding and
# the side caches (under 16: SGLang's byte tags keep it in four bits).
REGION_IDS = {**VARIANT_REGION_IDS, "kv": 8, "pad": 9, "ple": 10, "ring": 11, "ckey": 12}
POISON = 0xA5


def _mix(x: np.ndarray) -> np.ndarray:
    """A 32-bit integer hash (lowbias32), in place on a uint32 array, with one scratch array."""
    shifted = x >> np.uint32(16)
    x ^= shifted
    x *= np.uint32(0x7FEB352D)
    np.right_shift(x, np.uint32(15), out=shifted)
    x ^= shifted
    x *= np.uint32(0x846CA68B)
    np.right_shift(x, np.uint32(16), out=shifted)
    x ^= shifted
    return x


def unit_bytes_pattern(layer: int, block: int, region: str, first_unit: int, n_units: int,
                       unit_bytes: int) -> np.ndarray:
    """The bytes of units ``first_unit .. first_unit+n_units`` of a region, ``(n_units, unit_bytes)``."""
    key = ((layer * 0x01000193) ^ (block * 0x9E3779B1) ^ (REGION_IDS[region] << 24)) & 0xFFFFFFFF
    seed = _mix(np.array([key], dtype=np.uint32))
    units = np.arange(first_unit, first_unit + n_units, dtype=np.uint32)
    keys = _mix(units * np.uint32(0x85EBCA6B) ^ seed)
    words = (unit_bytes + 3) // 4
    grid = keys[:, None] + np.arange(words, dtype=np.uint32)[None, :] * np.uint32(0x632BE5AB)
    grid = _mix(grid)
    return grid.view(np.uint8).reshape(n_units, words * 4)[:, :unit_bytes]


@dataclass(frozen=True)
class Part:
    """A run of whole units of one region inside a page."""

    region: str          # the pattern's region name: x, B, C, Q, K, V, ssm, kv
    unit: str            # "channel" | "head"
    offset: int
    unit_bytes: int
    first_unit: int      # global unit index of the run's first unit
    units: int
    total_units: int     # units of the whole, unsharded region
    block: int | None = None   # the pattern's block, when not the page's (attention kernel blocks)
    layer: int | None = None   # the pattern's layer, when not the page's (attention streams)
    per_head: int = 0          # attention: units are head·per_head + token

    @property
    def end(self) -> int:
        return self.offset + self.units * self.unit_bytes

    def key(self, layer: int, block: int) -> tuple[int, int]:
        """The (layer, block) of the pattern this part holds, on a page of ``layer``, ``block``."""
        return (layer if self.layer is None else self.layer, block if self.block is None else self.block)

    def unit_name(self, unit: int) -> str:
        if self.per_head:
            head, token = divmod(unit, self.per_head)
            return f"head {head} token {token}"
        return f"{self.unit} {unit}"


@dataclass(frozen=True)
class PageShape:
    """What one rank keeps in one SSM page or one attention kernel-block slot."""

    parts: tuple[Part, ...]
    page_bytes: int

    @property
    def state_bytes(self) -> int:
        return max((p.end for p in self.parts), default=0)

    def describe(self, offset: int) -> str:
        """What the byte at ``offset`` stands for, e.g. ``C channel 5 byte 3``."""
        part = next((p for p in self.parts if p.offset <= offset < p.end), None)
        if part is None:
            return "padding" if offset < self.page_bytes else "beyond the page"
        unit, byte = divmod(offset - part.offset, part.unit_bytes)
        block = "" if part.block is None else f" of P kernel block {part.block}"
        return f"{part.region} {part.unit_name(part.first_unit + unit)} byte {byte}{block}"


def part_bytes(layer: int, block: int, part: Part) -> np.ndarray:
    """``(units, unit_bytes)``: the pattern of one part's units (``layer``, ``block``: its key)."""
    return unit_bytes_pattern(layer, block, part.region, part.first_unit, part.units, part.unit_bytes)


RowSource = Callable[[int, int, Part], np.ndarray]


def fill_page(out: np.ndarray, shape: PageShape, layer: int, block: int, rows: RowSource = part_bytes) -> None:
    """Write one block's page of ``shape`` into ``out``, padding included (``rows``: as ``part_bytes``)."""
    for part in shape.parts:
        out[part.offset:part.end] = rows(*part.key(layer, block), part).reshape(-1)
    pad = shape.page_bytes - shape.state_bytes
    if pad > 0:
        out[shape.state_bytes:shape.page_bytes] = unit_bytes_pattern(layer, block, "pad", 0, 1, pad).ravel()


def page(shape: PageShape, layer: int, block: int, rows: RowSource = part_bytes) -> np.ndarray:
    out = np.empty(shape.page_bytes, dtype=np.uint8)
    fill_page(out, shape, layer, block, rows)
    return out
