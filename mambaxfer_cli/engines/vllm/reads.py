"""The reads vLLM issues (0.33 and 0.34), beside the exact ones (``planning/reads.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.planning.layout import RankLayout
from mambaxfer_cli.planning.reads import Read, Segment, exact_reads, tp_ratio

EXACT, VLLM = SEMANTICS = ("exact", "vllm")     # --semantics: mambaxfer's exact reads, or vLLM's


def vllm_reads(prefill: Sequence[RankLayout], decode: Sequence[RankLayout]) -> tuple[Read, ...]:
    """What vLLM issues (right or wrong) from D's own region sizes (docs/reference.md)."""
    p_tp, d_tp = len(prefill), len(decode)
    ratio = tp_ratio(p_tp, d_tp)
    if ratio is None:
        raise Refused(f"vLLM needs one TP size to divide the other (P TP {p_tp}, D TP {d_tp}); "
                        f"use --semantics exact to plan this pairing")
    reads: list[Read] = []
    for d in decode:
        conv = [r for r in d.regions if r.kind == "conv"]
        ssm = next(r for r in d.regions if r.kind == "ssm")
        # D reads a slice (lro) of one P rank's regions, or its own regions in ``a`` slices, one per P rank
        a, up, lro = (1, ratio, d.rank % ratio) if ratio > 0 else (-ratio, 1, 0)
        for region in conv:
            if region.size % a:
                raise UserError(f"vLLM cannot split region '{region.name}' ({region.size} bytes) "
                                f"into {a} equal parts")
        for i, p in enumerate([prefill[d.rank // ratio]] if ratio > 0 else prefill[d.rank * a:(d.rank + 1) * a]):
            segs, running = [], 0
            for region in conv:
                part = region.size // a
                segs.append(Segment(region.name, running * up // a + lro * region.size, region.offset + i * part, part))
                running += region.size
            segs.append(Segment(ssm.name, p.conv_bytes + lro * d.ssm_bytes, d.conv_bytes + i * (d.ssm_bytes // a),
                                d.ssm_bytes if ratio > 0 else p.ssm_bytes))
            reads.append(Read(d.rank, p.rank, tuple(segs)))
    return tuple(reads)


@dataclass(frozen=True)
class LengthMismatch:
    """A pair of descriptors vLLM posts with unequal lengths: NIXL refuses the transfer."""

    d_rank: int
    p_rank: int
    region: str
    local_bytes: int      # D's descriptor: its own slice of the region
    remote_bytes: int     # P's descriptor: P's whole region, as P registered it

    def __str__(self) -> str:
        return (f"D{self.d_rank} {self.region} slice {self.local_bytes} bytes <- P{self.p_rank} "
                f"{self.region} {self.remote_bytes} bytes")


def vllm_length_mismatches(prefill: Sequence[RankLayout], decode: Sequence[RankLayout]) -> list[LengthMismatch]:
    """Where vLLM's descriptor pairs differ in length, so NIXL's ``makeXferReq`` refuses every READ:
    with ``tp_ratio < 0``, P's whole temporal descriptor against D's slice of its own."""
    ratio = tp_ratio(len(prefill), len(decode))
    if ratio is None or ratio > 0:
        return []
    a = -ratio
    pairs = [(d, prefill[d.rank * a + i]) for d in decode for i in range(a)]
    return [LengthMismatch(d.rank, p.rank, next(r.name for r in d.regions if r.kind == "ssm"), d.ssm_bytes // a,
                           p.ssm_bytes) for d, p in pairs if p.ssm_bytes != d.ssm_bytes // a]


def plan_reads(prefill: Sequence[RankLayout], decode: Sequence[RankLayout], semantics: str) -> tuple[Read, ...]:
    if semantics == EXACT:
        return exact_reads(prefill, decode)
    if semantics == VLLM:
        return vllm_reads(prefill, decode)
    raise UserError(f"unknown semantics '{semantics}'; choose one of: {', '.join(SEMANTICS)}")
