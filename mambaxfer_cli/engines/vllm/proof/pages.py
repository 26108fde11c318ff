"""What every page of a rank's KV-cache tensors holds, as check and execute fill and verify them: SSM
state, or attention kernel blocks whose token ``t`` of head ``h`` is P's pattern unit ``h·kernel_P + t``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mambaxfer_cli.engines.vllm.descriptors import kernel_blocks
from mambaxfer_cli.engines.vllm.engine import EngineLayout
from mambaxfer_cli.planning.layout import RankLayout
from mambaxfer_cli.planning.model import ATTENTION, SSM, ModelSpec
from mambaxfer_cli.engines.vllm.plan import Plan
from mambaxfer_cli.proof.pattern import PageShape, Part
from mambaxfer_cli.planning.variants import VARIANTS

SSM_PAGE, ATTENTION_PAGE = "ssm", "attention"

Run = tuple[int, int, int, int]   # (first token in the D kernel block, P kernel block, first P token, tokens)


def ssm_shape(model: ModelSpec, layout: RankLayout, page: int) -> PageShape:
    totals = {shape.name: shape.units(model.params) for shape in VARIANTS[model.variant].regions}
    return PageShape(tuple(Part(r.name, r.unit, r.offset, r.unit_bytes, r.shard.start, len(r.shard),
                                totals[r.name]) for r in layout.regions), page)


def token_offset(heads: int, kernel: int, sub_blocks: int, head: int, token: int) -> int:
    """Where a head's token sits in a kernel block, in tokens: ``[heads][kernel]``, or as received in
    ``sub_blocks`` pieces ``[sub_blocks][heads][kernel / sub_blocks]`` (before vLLM rearranges them)."""
    piece = kernel // sub_blocks
    sub, at = divmod(token, piece)
    return sub * heads * piece + head * piece + at


def attention_shape(model: ModelSpec, side: EngineLayout, rank: int, tensor: int, p_kernel: int,
                    kernels: Sequence[Sequence[Run]], sub_blocks: int = 1) -> PageShape:
    """A page of kernel blocks, ``kernels[j]`` the token runs block ``j`` holds for every head and stream
    (``p_kernel``: P's kernel tokens; ``sub_blocks``: as vLLM receives it, before rearranging it)."""
    spt = side.lists.streams_per_tensor
    unit = side.head_token_bytes // spt
    heads = side.heads(rank)
    stream_bytes = side.kernel_block_bytes // spt
    own = side.kernel_tokens
    assert model.num_kv_heads is not None, "an attention page needs the model's KV heads"
    total = model.num_kv_heads * p_kernel
    parts = []
    for j, runs in enumerate(kernels):
        for s in range(spt):
            for h in range(heads.start, heads.end):
                base = j * side.kernel_block_bytes + s * stream_bytes
                piece = own // sub_blocks
                for local, block, first, count in runs:
                    at = token_offset(len(heads), own, sub_blocks, h - heads.start, local)
                    assert local // piece == (local + count - 1) // piece, "a run crosses a received sub-block"
                    parts.append(Part("kv", "token", base + at * unit, unit, h * p_kernel + first, count, total,
                                      block=int(block), layer=tensor * spt + s, per_head=p_kernel))
    return PageShape(tuple(parts), side.page_bytes)


def p_attention_shape(model: ModelSpec, side: EngineLayout, rank: int, tensor: int, block: int) -> PageShape:
    """P's attention page of logical block ``block``: its own kernel blocks, whole."""
    bpl, k = side.geometry.blocks_per_logical, side.kernel_tokens
    return attention_shape(model, side, rank, tensor, k, [[(0, block * bpl + j, 0, k)] for j in range(bpl)])


def token_runs(d_kernel: int, d_tokens: int, p_kernels: Sequence[int], p_tokens: int, start: int) -> list[Run]:
    """The runs of one D kernel block holding request tokens ``start .. start + d_tokens``."""
    runs, q, end = [], start, start + d_tokens
    while q < end:
        count = min(end - q, p_tokens - q % p_tokens)
        runs.append((q - start, int(p_kernels[q // p_tokens]), q % p_tokens, count))
        q += count
    return runs


@dataclass(frozen=True)
class ExpectedPage:
    """One D page of the request: what it must hold after the transfer."""

    kind: str              # "ssm" | "attention"
    tensor: int
    block: int             # D's logical block
    p_block: int           # P's logical block (SSM pages); -1 for attention pages
    shape: PageShape       # D's bytes, with each part's P pattern

    @property
    def key(self) -> tuple[int, int]:
        return (self.tensor, self.block)


def request_pages(plan: Plan, d_rank: int) -> list[ExpectedPage]:
    """Every D page of the request in request order (groups, tensors, blocks), an attention page as D
    holds it when the reads complete (before vLLM rearranges received sub-blocks)."""
    desc, decode, prefill = plan.moved_descriptors, plan.decode, plan.prefill
    model = plan.model
    out = []
    layout = decode.ranks[d_rank]
    ssm = ssm_shape(model, layout, decode.page_bytes)
    d_bpl, p_bpl = decode.geometry.blocks_per_logical, prefill.geometry.blocks_per_logical
    kd, kp = decode.kernel_tokens, prefill.kernel_tokens
    sub_blocks = plan.received_sub_blocks
    for group, (kind, p_blocks, d_blocks) in enumerate(zip(desc.groups, desc.request.prefill_blocks,
                                                           desc.request.decode_blocks)):
        if kind == ATTENTION:
            if not decode.has_attention:
                continue
            p_kernels = kernel_blocks(p_blocks, p_bpl)
            for tensor in range(desc.tensors_of(group)):
                for i, db in enumerate(d_blocks.tolist()):
                    kernels = [token_runs(db * d_bpl + j, kd, p_kernels, kp, (i * d_bpl + j) * kd)
                               for j in range(d_bpl)]
                    shape = attention_shape(model, decode, d_rank, tensor, kp, kernels, sub_blocks)
                    out.append(ExpectedPage(ATTENTION_PAGE, tensor, db, -1, shape))
        elif kind == SSM:
            for tensor in range(desc.tensors_of(group)):
                out.extend(ExpectedPage(SSM_PAGE, tensor, db, pb, ssm)
                           for pb, db in zip(p_blocks.tolist(), d_blocks.tolist()))
    return out


def p_page_kinds(plan: Plan) -> dict[int, str]:
    """P's logical blocks the request hands to attention groups (every other page holds SSM state)."""
    desc = plan.moved_descriptors
    return {int(b): ATTENTION_PAGE for kind, blocks in zip(desc.groups, desc.request.prefill_blocks)
            if kind == ATTENTION for b in blocks.tolist()}


def p_page_shape(plan: Plan, p_rank: int, tensor: int, block: int, kinds: dict[int, str]) -> PageShape:
    """What P rank ``p_rank`` keeps in logical block ``block`` of tensor ``tensor``."""
    side = plan.prefill
    if kinds.get(block) == ATTENTION_PAGE and side.has_attention:
        return p_attention_shape(plan.model, side, p_rank, tensor, block)
    return ssm_shape(plan.model, side.ranks[p_rank], side.page_bytes)
