"""The byte pattern P pages are filled with: a pure function of
(layer, block, region, global unit, byte), so replicas of a unit hold identical bytes and
any byte that lands in the wrong place, block or layer differs from what D expects."""

from __future__ import annotations

import numpy as np

from mambaxfer_cli.layout import RankLayout

REGION_IDS = {"x": 1, "B": 2, "C": 3, "Q": 4, "K": 5, "V": 6, "ssm": 7, "kv": 8, "pad": 9}
POISON = 0xA5


def _mix(x: np.ndarray) -> np.ndarray:
    """A 32-bit integer hash (lowbias32), in place on a uint32 array."""
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
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


def fill_page(out: np.ndarray, layout: RankLayout, layer: int, block: int) -> None:
    """Write one block's state of ``layout`` into ``out`` (a page), padding included."""
    for region in layout.regions:
        out[region.offset:region.end] = unit_bytes_pattern(
            layer, block, region.name, region.shard.start, len(region.shard), region.unit_bytes).ravel()
    pad = out.shape[0] - layout.state_bytes
    if pad > 0:
        out[layout.state_bytes:] = unit_bytes_pattern(layer, block, "pad", 0, 1, pad).ravel()


def page(layout: RankLayout, layer: int, block: int, page_bytes: int) -> np.ndarray:
    out = np.empty(page_bytes, dtype=np.uint8)
    fill_page(out, layout, layer, block)
    return out


def kv_pattern(stream: int, kernel_block: int, first_head: int, n_heads: int, head_bytes: int) -> np.ndarray:
    """The stand-in bytes of an attention kernel block slot: heads ``first_head..`` of a stream."""
    return unit_bytes_pattern(stream, kernel_block, "kv", first_head, n_heads, head_bytes).ravel()
