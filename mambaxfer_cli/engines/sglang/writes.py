"""What SGLang writes into each decode rank's slot, per (state, layer) entry (``slices.py``, ``ranks.py``),
and the exact bytes (``planning/reads.py``). Offsets are within one slot of one layer's entry; every layer
of a field moves alike."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

from mambaxfer_cli.engines.sglang.entries import CONV, TEMPORAL, TransferEntry, beside_entries, entry_for
from mambaxfer_cli.engines.sglang.ranks import writers
from mambaxfer_cli.engines.sglang.release import MOONCAKE, SGLANG_0_5_23, Release
from mambaxfer_cli.engines.sglang.shapes import state_shape, tp_refusal
from mambaxfer_cli.engines.sglang.slices import byte_blocks
from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.planning.layout import RankLayout, Region, rank_layout
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.planning.reads import exact_reads


@dataclass(frozen=True)
class StateWrite:
    """Bytes ``[src, src + length)`` of prefill rank ``p_rank``'s item into ``[dst, dst + length)``
    of decode rank ``d_rank``'s item of the same field and layer."""

    field: str
    d_rank: int
    p_rank: int
    src: int
    dst: int
    length: int

    def to_dict(self) -> dict[str, int | str]:
        return asdict(self)


@dataclass(frozen=True)
class Side:
    """One engine's state, as SGLang lays it out: the model (in SGLang's dtypes) at one TP size."""

    model: ModelSpec
    tp: int

    def layouts(self) -> tuple[RankLayout, ...]:
        return tuple(rank_layout(self.model, self.tp, r) for r in range(self.tp))

    def entry(self, field: str) -> TransferEntry:
        shape = state_shape(self.model, self.tp)
        return entry_for(field, shape, self.model.conv_dtype, self.model.ssm_dtype)

    @property
    def fields(self) -> tuple[str, ...]:
        return state_shape(self.model, self.tp).fields

    @property
    def outer(self) -> int:
        """Conv rows before the channels (Kimi's ``(K-1, dim)``), 1 where channels come first."""
        return state_shape(self.model, self.tp).conv_outer


def check_side(model: ModelSpec, tp: int, release: Release = SGLANG_0_5_23) -> Side:
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise UserError(f"TP size must be a positive integer, got {tp!r}")
    why = tp_refusal(model, tp, release)
    if why:
        raise Refused(f"{model.name}: {release.label} cannot serve it at TP {tp}: {why}")
    side = Side(model, tp)
    layout = rank_layout(model, tp, 0)
    # SGLang's item lengths and mambaxfer's layout describe the same bytes.
    for field in side.fields:
        assert side.entry(field).item_len == item_len(layout, field), (side.entry(field), layout)
    return side


def sglang_writes(prefill: Side, decode: Side, backend: str = "nixl",
                  release: Release = SGLANG_0_5_23) -> tuple[StateWrite, ...]:
    """Every write SGLang posts for one request, one layer: at equal TP each item whole (Mooncake
    refuses unequal items), else the blocks of ``compute_mamba_state_slice_byte_blocks``."""
    out = []
    # The replicated entries (side and QSA states) move whole from the elected writers
    # (should_send_replicated_state), as SGLang's slicer moves any dim-0 item and Mooncake its QSA states.
    sides = {e.field: e for e in beside_entries(decode.model)}
    for field, src, dst in [(f, prefill.entry(f), decode.entry(f)) for f in prefill.fields] + [
            (e.field, e, sides[e.field]) for e in {e.field: e for e in beside_entries(prefill.model)}.values()]:
        if src.item_len == 0:
            continue
        for d in range(decode.tp):
            for p in writers(prefill.tp, decode.tp, d):
                if prefill.tp == decode.tp:
                    if backend == MOONCAKE and src.item_len != dst.item_len:
                        raise Refused("SGLang: " + release.message("slot_size", prefill=src.item_len,
                                                                     decode=dst.item_len))
                    out.append(StateWrite(field, d, p, 0, 0, src.item_len))
                    continue
                for b in byte_blocks(src, dst, src_tp=prefill.tp, dst_tp=decode.tp, dst_rank=d, src_rank=p,
                                     release=release):
                    out.append(StateWrite(field, d, p, b.src, b.dst, b.length))
    return tuple(out)


def _field_of(region: Region) -> str:
    """The entry that holds a region: its own tensor's, else conv or temporal."""
    return region.name if region.own else CONV if region.kind == "conv" else TEMPORAL


def _base(layout: RankLayout, field: str) -> int:
    """Where ``field``'s item starts in the layout's bytes."""
    return next((r.offset for r in layout.regions if _field_of(r) == field), 0)


def _by_rows(w: StateWrite, p: RankLayout, d: RankLayout, outer: int) -> list[StateWrite]:
    """A conv write of whole channels (``outer`` elements each) as the rows of a ``(K-1, dim)``
    item hold them: one write per row."""
    unit = p.regions[0].unit_bytes
    e, p_dim, d_dim = unit // outer, p.conv_bytes // unit, d.conv_bytes // unit
    return [StateWrite(w.field, w.d_rank, w.p_rank, (r * p_dim + w.src // unit) * e,
                       (r * d_dim + w.dst // unit) * e, w.length // unit * e) for r in range(outer)]


def exact_writes(prefill: Side, decode: Side) -> tuple[StateWrite, ...]:
    """The right bytes for each decode rank, from mambaxfer's exact reads, in entry offsets."""
    p_layouts, d_layouts = prefill.layouts(), decode.layouts()
    outer = decode.outer
    out: list[StateWrite] = []
    for read in exact_reads(p_layouts, d_layouts):
        p, d = p_layouts[read.p_rank], d_layouts[read.d_rank]
        for seg in read.segments:
            field = _field_of(d.region(seg.region))
            w = StateWrite(field, read.d_rank, read.p_rank, seg.remote_offset - _base(p, field),
                           seg.local_offset - _base(d, field), seg.size)
            out += _by_rows(w, p, d, outer) if field == CONV and outer > 1 else [w]
    # A replicated side item: every P rank holds it whole; the first the rank mapping names gives it.
    for e in {e.field: e for e in beside_entries(decode.model)}.values():
        out += [StateWrite(e.field, d, writers(prefill.tp, decode.tp, d)[0], 0, 0, e.item_len)
                for d in range(decode.tp)]
    return tuple(out)


# --- comparing bytes by what they hold ---------------------------------------------------------------

@dataclass(frozen=True)
class _Piece:
    """Bytes ``[lo, hi)`` of an item holding region ``name`` from global byte ``start`` on."""
    lo: int
    hi: int
    name: str | None          # None: bytes outside the source item
    start: int
    unit_bytes: int


def field_regions(layout: RankLayout, field: str) -> list[tuple[Region, int]]:
    """The regions of one field's item, each with its offset in the item."""
    return [(r, r.offset - _base(layout, field)) for r in layout.regions if _field_of(r) == field]


def item_len(layout: RankLayout, field: str) -> int:
    return sum(r.size for r in layout.regions if _field_of(r) == field)


def _pieces(layout: RankLayout, field: str, outer: int = 1) -> list[_Piece]:
    found = field_regions(layout, field)
    if field != CONV or outer == 1:
        return [_Piece(at, at + r.size, r.name, r.shard.start * r.unit_bytes, r.unit_bytes) for r, at in found]
    # (K-1, dim): each row holds every channel's element of that row; rows told apart by ``start``.
    regions = [r for r, _ in found]
    dim = layout.conv_bytes // regions[0].unit_bytes
    out = []
    for row in range(outer):
        for r in regions:
            e = r.unit_bytes // outer
            lo = (row * dim + r.offset // r.unit_bytes) * e
            out.append(_Piece(lo, lo + len(r.shard) * e, r.name, (row << 40) + r.shard.start * e, e))
    return out


def _written(write: StateWrite, source: RankLayout, outer: int = 1) -> list[_Piece]:
    """What one write puts where, in the decode item's offsets."""
    out, lo, hi = [], write.src, write.src + write.length
    covered = lo
    for piece in _pieces(source, write.field, outer):
        a, b = max(lo, piece.lo), min(hi, piece.hi)
        if a < b:
            out.append(_Piece(write.dst + a - lo, write.dst + b - lo, piece.name, piece.start + a - piece.lo,
                              piece.unit_bytes))
            covered = max(covered, b)
    end = item_len(source, write.field)
    if hi > end:   # bytes read past the source item (another slot's)
        a = max(lo, end)
        out.append(_Piece(write.dst + a - lo, write.dst + hi - lo, None, 0, 0))
    return out


@dataclass(frozen=True)
class FieldOutcome:
    """One decode rank's item of one field, one layer: bytes right, wrong (written with other
    bytes), missing (never written), and written beyond the item (into a neighbouring slot)."""

    field: str
    d_rank: int
    item_bytes: int
    wrong: int
    missing: int
    beyond: int

    @property
    def bad(self) -> int:
        return self.wrong + self.missing + self.beyond

    def to_dict(self) -> dict[str, int | str]:
        return asdict(self)


def compare(writes: Sequence[StateWrite], prefill: Side, decode: Side) -> tuple[FieldOutcome, ...]:
    """Each decode item byte by byte against the exact layout: a byte is right when something
    writes it and everything that writes it carries the unit the decode rank keeps there."""
    p_layouts, d_layouts = prefill.layouts(), decode.layouts()
    out = []
    for field in decode.fields:
        for d in d_layouts:
            size = item_len(d, field)
            if size == 0:
                continue
            wanted = _pieces(d, field, decode.outer)
            written = [piece for w in writes if w.field == field and w.d_rank == d.rank
                       for piece in _written(w, p_layouts[w.p_rank], prefill.outer)]
            beyond = sum(max(0, p.hi - max(p.lo, size)) + max(0, min(p.hi, 0) - p.lo) for p in written)
            cuts = {0, size}
            for p in (*wanted, *written):
                cuts.update(c for c in (p.lo, p.hi) if 0 < c < size)
            edges = sorted(cuts)
            wrong = missing = 0
            for a, b in zip(edges, edges[1:]):
                want = next(p for p in wanted if p.lo <= a < p.hi)
                over = [p for p in written if p.lo <= a < p.hi]
                if not over:
                    missing += b - a
                elif any(p.name != want.name or p.unit_bytes != want.unit_bytes
                         or p.start + (a - p.lo) != want.start + (a - want.lo) for p in over):
                    wrong += b - a
            out.append(FieldOutcome(field, d.rank, size, wrong, missing, beyond))
    return tuple(out)
