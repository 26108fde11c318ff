"""Which bytes each D rank reads from which P rank, exactly (vLLM's reads: engines/vllm/reads.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Sequence

from mambaxfer_cli.planning.layout import RankLayout, Shard

@dataclass(frozen=True)
class Segment:
    """A run of bytes copied from a P page (``remote_offset``) into a D page (``local_offset``)."""

    region: str
    remote_offset: int
    local_offset: int
    size: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Read:
    d_rank: int
    p_rank: int
    segments: tuple[Segment, ...]

    @property
    def bytes(self) -> int:
        return sum(s.size for s in self.segments)

    def to_dict(self) -> dict[str, Any]:
        return {"d_rank": self.d_rank, "p_rank": self.p_rank,
                "segments": [s.to_dict() for s in self.segments]}


def tp_ratio(p_tp: int, d_tp: int) -> int | None:
    """vLLM's tp_ratio: D/P when D >= P, -(P/D) when P > D; None when neither divides."""
    if d_tp >= p_tp:
        return d_tp // p_tp if d_tp % p_tp == 0 else None
    return -(p_tp // d_tp) if p_tp % d_tp == 0 else None


@dataclass(frozen=True)
class Holding:
    """A P rank that holds a shard of a region, and where that shard starts in its page."""
    rank: int
    shard: Shard
    offset: int       # byte offset of the shard's first unit in the holder's page


def assign_units(want: Shard, holders: Sequence[Holding], preferred: set[int]) -> list[tuple[Holding, Shard]]:
    """Cover ``want`` with ranges of units, each from one holder: the lowest-numbered preferred
    one where several hold a unit, else the lowest-numbered; a holder's consecutive units one range."""
    cuts = {want.start, want.end}
    for h in holders:
        cuts.update(c for c in (h.shard.start, h.shard.end) if want.start < c < want.end)
    edges = sorted(cuts)
    out: list[tuple[Holding, Shard]] = []
    for u0, u1 in zip(edges, edges[1:]):
        candidates = [h for h in holders if h.shard.start <= u0 and u1 <= h.shard.end]
        assert candidates, f"no P rank holds units [{u0}, {u1})"
        best = min(candidates, key=lambda h: (h.rank not in preferred, h.rank))
        if out and out[-1][0] is best and out[-1][1].end == u0:
            out[-1] = (best, Shard(out[-1][1].start, u1))
        else:
            out.append((best, Shard(u0, u1)))
    return out


def _group(d_rank: int, pieces: list[tuple[int, Segment]]) -> list[Read]:
    by_source: dict[int, list[Segment]] = {}
    for p_rank, segment in pieces:
        by_source.setdefault(p_rank, []).append(segment)
    return [Read(d_rank, p, tuple(segs)) for p, segs in sorted(by_source.items())]


def exact_reads(prefill: Sequence[RankLayout], decode: Sequence[RankLayout]) -> tuple[Read, ...]:
    """docs/reference.md §3, exact semantics: every unit of every D region from a P rank that holds it."""
    reads: list[Read] = []
    for d in decode:
        first = d.regions[0]
        preferred = {p.rank for p in prefill if p.region(first.name).shard.intersect(first.shard)}
        pieces: list[tuple[int, Segment]] = []
        for region in d.regions:
            holders = [Holding(p.rank, p.region(region.name).shard, p.region(region.name).offset)
                       for p in prefill]
            assert all(p.region(region.name).unit_bytes == region.unit_bytes for p in prefill)
            for holder, units in assign_units(region.shard, holders, preferred):
                ub = region.unit_bytes
                pieces.append((holder.rank, Segment(
                    region.name,
                    remote_offset=holder.offset + (units.start - holder.shard.start) * ub,
                    local_offset=region.offset + (units.start - region.shard.start) * ub,
                    size=len(units) * ub)))
        reads.extend(_group(d.rank, pieces))
    return tuple(reads)


def coalesce(reads: Sequence[Read]) -> tuple[Read, ...]:
    """Merge segments adjacent on both sides, as NIXL's prepared transfers would."""
    out = []
    for read in reads:
        merged: list[Segment] = []
        for seg in read.segments:
            last = merged[-1] if merged else None
            if (last and last.remote_offset + last.size == seg.remote_offset
                    and last.local_offset + last.size == seg.local_offset):
                merged[-1] = replace(last, region=f"{last.region}+{seg.region}", size=last.size + seg.size)
            else:
                merged.append(seg)
        out.append(replace(read, segments=tuple(merged)))
    return tuple(out)


@dataclass(frozen=True)
class Misread:
    """A piece of a segment that lands bytes of the wrong region or unit."""

    d_rank: int
    p_rank: int
    local_offset: int
    size: int
    remote_offset: int
    wanted: str          # e.g. "C[0:128]" (region and global units)
    got: str             # what the remote bytes hold, e.g. "ssm[0:1]" or "beyond the P state"

    def __str__(self) -> str:
        return f"D{self.d_rank} {self.wanted} <- P{self.p_rank} {self.got}"


def _unit_span(layout: RankLayout, offset: int, size: int, side: str = "P") -> str:
    region = layout.region_at(offset)
    if region is None:
        return f"beyond the {side} state" if offset >= layout.state_bytes else "no region"
    first = region.shard.start + (offset - region.offset) // region.unit_bytes
    last = region.shard.start + (offset + size - 1 - region.offset) // region.unit_bytes
    return f"{region.name}[{first}:{last + 1}]"


def misreads(reads: Sequence[Read], prefill: Sequence[RankLayout], decode: Sequence[RankLayout]) -> list[Misread]:
    """Pieces of segments whose remote bytes are not the units the local bytes stand for."""
    out = []
    for read in reads:
        d, p = decode[read.d_rank], prefill[read.p_rank]
        for seg in read.segments:
            cuts = {0, seg.size}
            for layout, base in ((d, seg.local_offset), (p, seg.remote_offset)):
                for r in layout.regions:
                    for edge in (r.offset, r.end):
                        if 0 < edge - base < seg.size:
                            cuts.add(edge - base)
            edges = sorted(cuts)
            for lo, hi in zip(edges, edges[1:]):
                local, remote = seg.local_offset + lo, seg.remote_offset + lo
                lr, rr = d.region_at(local), p.region_at(remote)
                ok = (lr is not None and rr is not None and rr.name == lr.name and rr.unit_bytes == lr.unit_bytes
                      and (remote - rr.offset) + rr.shard.start * rr.unit_bytes
                      == (local - lr.offset) + lr.shard.start * lr.unit_bytes)
                if not ok:
                    out.append(Misread(read.d_rank, read.p_rank, local, hi - lo, remote,
                                       _unit_span(d, local, hi - lo, "D"), _unit_span(p, remote, hi - lo)))
    return out
