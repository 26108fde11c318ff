"""SGLang's writes proven on real bytes: prefill slots filled with the pattern of their units, the
writes applied, each decode slot compared with what it must hold. One layer's entries stand for all;
three slots per entry, the request in the middle one, so a write past its item reads or lands in a
neighbour's."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from mambaxfer_cli.engines.sglang.entries import CONV, TransferEntry
from mambaxfer_cli.engines.sglang.families import merged
from mambaxfer_cli.engines.sglang.kv import KV_FIELDS, KVSide
from mambaxfer_cli.engines.sglang.writes import FieldOutcome, Side, StateWrite, field_regions, item_len
from mambaxfer_cli.planning.layout import RankLayout
from mambaxfer_cli.proof.pattern import POISON, REGION_IDS, unit_bytes_pattern

SLOTS = 3
SLOT = 1          # the request's slot, on both sides
PATTERN_REGIONS = merged("PATTERN_REGIONS")     # a replicated field's pattern region, where not "ple"


def rows_first(data: np.ndarray, layout: RankLayout, field: str, outer: int) -> np.ndarray:
    """A conv item laid out channel by channel, as SGLang keeps Kimi's: ``(K-1, dim)``, each of
    the ``outer`` rows every channel's element of that row."""
    if field != CONV or outer == 1:
        return data
    return np.ascontiguousarray(data.reshape(sum(layout.sub_projection_dims), outer, -1).swapaxes(0, 1)).ravel()


def item(layout: RankLayout, field: str, slot: int, layer: int = 0, outer: int = 1) -> np.ndarray:
    """What one slot of one rank's entry of ``layer`` holds: each region's units as the slot's
    pattern; ``outer``: the conv rows before its channels."""
    out = np.empty(item_len(layout, field), dtype=np.uint8)
    for region, offset in field_regions(layout, field):
        out[offset:offset + region.size] = unit_bytes_pattern(
            layer, slot, region.name, region.shard.start, len(region.shard), region.unit_bytes).ravel()
    return rows_first(out, layout, field, outer)


def entry_item(layout: RankLayout, entry: TransferEntry, slot: int) -> np.ndarray:
    """One slot of an entry: the state's units, or a replicated item's bytes (alike on every rank)."""
    if entry.replicated:
        return replicated_item(entry, slot)
    return item(layout, entry.field, slot, entry.layer_id, entry.outer_count)


def replicated_item(entry: TransferEntry, slot: int) -> np.ndarray:
    """A replicated entry's item (a side or QSA state), alike on every rank: its field's pattern."""
    return unit_bytes_pattern(entry.layer_id, slot, PATTERN_REGIONS.get(entry.field, "ple"), 0, 1, entry.item_len)[0]


def tags(layout: RankLayout, field: str, slot: int, outer: int = 1) -> np.ndarray:
    """Which byte each byte of the slot is (slot, region, byte): moved beside the bytes, so that a
    wrong byte that happens to hold the right value still counts as wrong."""
    out = np.empty(item_len(layout, field), dtype=np.int64)
    for region, offset in field_regions(layout, field):
        first = region.shard.start * region.unit_bytes
        out[offset:offset + region.size] = ((slot << 44) | (REGION_IDS[region.name] << 40)
                                            | np.arange(first, first + region.size, dtype=np.int64))
    return rows_first(out, layout, field, outer)


Landed = tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]


def apply(writes: Sequence[StateWrite], prefill: Side, decode: Side, field: str) -> Landed:
    """Every write of ``field`` applied to poisoned decode entries, from pattern-filled prefill ones:
    each decode rank's bytes, their tags, and which were written."""
    p_layouts, d_layouts = prefill.layouts(), decode.layouts()
    mine = [w for w in writes if w.field == field]
    p_len = [item_len(layout, field) for layout in p_layouts]
    d_len = [item_len(layout, field) for layout in d_layouts]
    sources, source_tags = [], []
    for layout, size in zip(p_layouts, p_len):
        # Room for what a write reaches past its slot (a refused or broken plan may reach far).
        room = max([SLOTS * size, *(size * SLOT + w.src + w.length for w in mine if w.p_rank == layout.rank)])
        buffer, tagged = np.full(room, POISON, dtype=np.uint8), np.full(room, -1, dtype=np.int64)
        for slot in range(SLOTS):
            buffer[slot * size:(slot + 1) * size] = item(layout, field, slot, outer=prefill.outer)
            tagged[slot * size:(slot + 1) * size] = tags(layout, field, slot, prefill.outer)
        sources.append(buffer)
        source_tags.append(tagged)
    rooms = [max([SLOTS * size, *(size * SLOT + w.dst + w.length for w in mine if w.d_rank == layout.rank)])
             for layout, size in zip(d_layouts, d_len)]
    data = [np.full(room, POISON, dtype=np.uint8) for room in rooms]
    landed_tags = [np.full(room, -1, dtype=np.int64) for room in rooms]
    written = [np.zeros(room, dtype=bool) for room in rooms]
    for w in mine:
        src, dst = p_len[w.p_rank] * SLOT + w.src, d_len[w.d_rank] * SLOT + w.dst
        data[w.d_rank][dst:dst + w.length] = sources[w.p_rank][src:src + w.length]
        landed_tags[w.d_rank][dst:dst + w.length] = source_tags[w.p_rank][src:src + w.length]
        written[w.d_rank][dst:dst + w.length] = True
    return data, landed_tags, written


def outcomes(writes: Sequence[StateWrite], prefill: Side, decode: Side) -> tuple[FieldOutcome, ...]:
    """Each decode rank's item of each field, byte by byte against the bytes it must hold: wrong
    (written, and not the byte it must hold), missing (never written), beyond (written outside it)."""
    out = []
    d_layouts = decode.layouts()
    for field in decode.fields:
        if not any(item_len(layout, field) for layout in d_layouts):
            continue
        for layout, data, tagged, written in zip(d_layouts, *apply(writes, prefill, decode, field)):
            size = item_len(layout, field)
            lo, hi = size * SLOT, size * (SLOT + 1)
            inside = written[lo:hi]
            differs = ((data[lo:hi] != item(layout, field, SLOT, outer=decode.outer))
                       | (tagged[lo:hi] != tags(layout, field, SLOT, decode.outer)))
            wrong = int(np.count_nonzero(inside & differs))
            missing = int(np.count_nonzero(~inside))
            beyond = int(np.count_nonzero(written[:lo]) + np.count_nonzero(written[hi:]))
            out.append(FieldOutcome(field, layout.rank, size, wrong, missing, beyond))
    return tuple(out)


def kv_bytes_wrong(writes: Sequence[StateWrite], prefill: KVSide, decode: KVSide, layers: range) -> int:
    """One page of K and of V of each of ``layers`` on every decode rank after ``writes``, byte by
    byte against the heads it must hold: the bytes wrong, never written or written past it."""
    wrong = 0
    for layer, field, d in ((x, f, d) for x in layers for f in KV_FIELDS for d in range(decode.tp)):
        want = decode.rank(d).page(field, 0, layer)
        mine = [w for w in writes if (w.field, w.d_rank) == (field, d)]
        got = np.full(max([want.size, *(w.dst + w.length for w in mine)]), POISON, dtype=np.uint8)
        written = np.zeros(got.size, dtype=bool)
        for w in mine:
            got[w.dst:w.dst + w.length] = prefill.rank(w.p_rank).page(field, 0, layer)[w.src:w.src + w.length]
            written[w.dst:w.dst + w.length] = True
        wrong += int(np.count_nonzero(got[:want.size] != want)) + int(np.count_nonzero(written[want.size:]))
    return wrong


def replicated_wrong(writes: Sequence[StateWrite], entries: Sequence[TransferEntry], d_tp: int) -> dict[str, int]:
    """Each replicated field's bytes wrong after ``writes`` (side and QSA states: whole items, alike on
    every rank), over its entries and every decode rank: written with other bytes, never written, or
    written past the request's item."""
    out: dict[str, int] = {}
    for entry in (e for e in entries if e.replicated):
        size, mine = entry.item_len, [w for w in writes if w.field == entry.field]
        source = np.concatenate([replicated_item(entry, slot) for slot in range(SLOTS)])
        want, lo, hi = replicated_item(entry, SLOT), size * SLOT, size * (SLOT + 1)
        bad = 0
        for d in range(d_tp):
            into = [w for w in mine if w.d_rank == d]
            room = max([SLOTS * size, *(lo + w.dst + w.length for w in into)])
            got, written = np.full(room, POISON, dtype=np.uint8), np.zeros(room, dtype=bool)
            for w in into:
                src = source[lo + w.src:lo + w.src + w.length]     # past the source's slots: never right
                got[lo + w.dst:lo + w.dst + src.size] = src
                written[lo + w.dst:lo + w.dst + w.length] = True
            bad += int(np.count_nonzero(written[lo:hi] & (got[lo:hi] != want)) + np.count_nonzero(~written[lo:hi])
                       + np.count_nonzero(written[:lo]) + np.count_nonzero(written[hi:]))
        out[entry.field] = out.get(entry.field, 0) + bad
    return out
