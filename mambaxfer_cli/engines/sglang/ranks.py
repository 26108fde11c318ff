"""Which prefill ranks a decode rank is served by (disaggregation/common/conn.py
``CommonKVReceiver._resolve_rank_mapping``, the TP part, for a non-MLA model)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RankMapping:
    """One decode rank's view: the prefill ranks it targets, how many decode ranks each of them
    waits for (``required_dst_info_num``) and how many answers it waits for."""

    d_rank: int
    target_ranks: tuple[int, ...]
    required_dst_info_num: int
    required_prefill_response_num: int


def rank_mapping(p_tp: int, d_tp: int, d_rank: int) -> RankMapping:
    """The prefill ranks decode rank ``d_rank`` targets; integer division throughout: nothing
    checks that one size divides the other."""
    rank = d_rank % d_tp
    if d_tp == p_tp:
        return RankMapping(d_rank, (rank,), 1, 1)
    if d_tp > p_tp:
        per = d_tp // p_tp
        return RankMapping(d_rank, (rank // per,), per, 1)
    per = p_tp // d_tp
    return RankMapping(d_rank, tuple(range(rank * per, (rank + 1) * per)), 1, per)


@dataclass(frozen=True)
class RankFindings:
    """What the mapping does across a whole pairing, where one size does not divide the other."""

    unread: tuple[int, ...]                       # prefill ranks no decode rank targets
    missing: tuple[tuple[int, int], ...]          # (decode rank, prefill rank that does not exist)

    def __bool__(self) -> bool:
        return bool(self.unread or self.missing)

    def lines(self, p_tp: int) -> list[str]:
        out = [f"no decode rank reads prefill rank {r} (P TP {p_tp})" for r in self.unread]
        out += [f"decode rank {d} is pointed at prefill rank {p}, which does not exist (P TP {p_tp})"
                for d, p in self.missing]
        return out


def rank_findings(p_tp: int, d_tp: int) -> RankFindings:
    targets = [(d, p) for d in range(d_tp) for p in rank_mapping(p_tp, d_tp, d).target_ranks]
    pointed = {p for _, p in targets}
    return RankFindings(tuple(r for r in range(p_tp) if r not in pointed),
                        tuple((d, p) for d, p in targets if p >= p_tp))


def writers(p_tp: int, d_tp: int, d_rank: int) -> tuple[int, ...]:
    """The prefill ranks that exist and write into decode rank ``d_rank`` (prefill pushes)."""
    return tuple(p for p in rank_mapping(p_tp, d_tp, d_rank).target_ranks if p < p_tp)
