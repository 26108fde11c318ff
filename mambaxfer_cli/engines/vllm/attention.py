"""Which attention KV bytes a D rank reads from which P rank, and in which pieces (docs/reference.md
§5 and §7)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from mambaxfer_cli.engines.vllm.engine import EngineLayout
from mambaxfer_cli.engines.vllm.handshake import attention_sources
from mambaxfer_cli.planning.layout import Shard
from mambaxfer_cli.planning.reads import Holding, assign_units
from mambaxfer_cli.engines.vllm.reads import VLLM

Pieces = tuple[tuple[int, int], ...]


def head_sources(prefill: EngineLayout, decode: EngineLayout, d_rank: int, ssm_sources: set[int],
                 semantics: str) -> dict[int, Shard]:
    """The global KV heads D rank ``d_rank`` reads from each P rank: vLLM's ``compute_tp_mapping``,
    or (exact) a P rank it already reads SSM state from, else the lowest-numbered holder."""
    wanted = decode.kv_heads[d_rank]
    if wanted is None:
        return {}
    if semantics == VLLM:
        common = {p: prefill.heads(p).intersect(wanted) for p in attention_sources(prefill, decode, d_rank)}
        return {p: heads for p, heads in common.items() if heads is not None}
    holders = [Holding(rank, prefill.heads(rank), 0) for rank in range(prefill.tp)]
    out: dict[int, Shard] = {}
    for holder, heads in assign_units(wanted, holders, preferred=ssm_sources):
        assert holder.rank not in out, "one P rank gives a D rank two runs of heads"
        out[holder.rank] = heads
    return out


@dataclass(frozen=True)
class AttentionRead:
    """The pieces of one D rank's read of one P rank's attention, and how requests pair them."""

    heads: Shard
    local: Pieces
    remote: Pieces
    mode: str           # "block": one piece per block; "sub-block": vLLM's r sub-blocks; "tokens"
    local_tokens: int   # kernel tokens of D and P
    remote_tokens: int

    def slots(self, d_kernel: Sequence[int], p_kernel: Sequence[int], tokens: int) -> tuple[list[int], list[int]]:
        """Paired (local, remote) slots, ``kernel block · pieces + piece``, for a request of
        ``tokens`` tokens over these D and P kernel blocks."""
        kd, kp = self.local_tokens, self.remote_tokens
        nl, nr = len(self.local), len(self.remote)
        p_count = min(-(-tokens // kp), len(p_kernel))     # a drafter's P blocks may hold fewer (blocks raised)
        if self.mode == "block":
            count = min(len(d_kernel), p_count)
            return [b * nl for b in d_kernel[:count]], [b * nr for b in p_kernel[:count]]
        if self.mode == "sub-block":
            local = [b * nl + j for b in d_kernel for j in range(nl)]
            count = min(len(local), p_count)
            return local[:count], [b * nr for b in p_kernel[:count]]
        # By tokens: chunks of g tokens, head-major; each chunk's slot in D's and P's kernel block.
        g = math.gcd(kd, kp)
        chunks = range(0, tokens // g * g, g)
        local_first = [d_kernel[z // kd] * nl + (z % kd) // g for z in chunks]
        remote_first = [p_kernel[z // kp] * nr + (z % kp) // g for z in chunks]
        heads = range(len(self.heads))
        return ([first + h * (kd // g) for h in heads for first in local_first],
                [first + h * (kp // g) for h in heads for first in remote_first])


def attention_read(prefill: EngineLayout, decode: EngineLayout, d_rank: int, p_rank: int, heads: Shard,
                   semantics: str) -> AttentionRead:
    """How D rank ``d_rank`` reads ``heads`` from P rank ``p_rank``."""
    kd, kp = decode.kernel_tokens, prefill.kernel_tokens
    spt = decode.lists.streams_per_tensor
    unit = decode.head_token_bytes // spt            # one token of one head, in one stream
    d_first, p_first = decode.heads(d_rank).start, prefill.heads(p_rank).start
    d_at, p_at = heads.start - d_first, heads.start - p_first
    n = len(heads)
    if kd == kp:
        return AttentionRead(heads, ((d_at * kd * unit, n * kd * unit),), ((p_at * kp * unit, n * kp * unit),),
                             "block", kd, kp)
    if semantics == VLLM and kd % kp == 0:
        r = kd // kp
        sub = kp * len(decode.heads(d_rank)) * unit
        local = tuple((s * sub + d_at * kp * unit, n * kp * unit) for s in range(r))
        return AttentionRead(heads, local, ((p_at * kp * unit, n * kp * unit),), "sub-block", kd, kp)
    g = math.gcd(kd, kp)
    local = tuple(((d_at + h) * kd * unit + c * g * unit, g * unit) for h in range(n) for c in range(kd // g))
    remote = tuple(((p_at + h) * kp * unit + c * g * unit, g * unit) for h in range(n) for c in range(kp // g))
    return AttentionRead(heads, local, remote, "tokens", kd, kp)


def whole_block(side: EngineLayout) -> Pieces:
    """The one piece of a list that reads a stream's kernel blocks whole."""
    spt = side.lists.streams_per_tensor
    return ((0, side.kernel_block_bytes // spt),)


def no_attention_read(prefill: EngineLayout, decode: EngineLayout, semantics: str) -> Pieces:
    """The attention pieces of D's list for a P rank it reads SSM state from and no attention: vLLM's
    ``r`` sub-blocks where D's kernel block is ``r`` times P's (``_build_fa_local``), else one."""
    kd, kp = decode.kernel_tokens, prefill.kernel_tokens
    if semantics != VLLM or not decode.has_attention or kd == kp or kd % kp:
        return whole_block(decode)
    r = kd // kp
    sub = decode.kernel_block_bytes // decode.lists.streams_per_tensor // r
    return tuple((s * sub, sub) for s in range(r))
