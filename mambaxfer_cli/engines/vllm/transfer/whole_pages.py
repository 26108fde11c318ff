"""Whole pages in an execute run (PLE pages, the indexer's rings and compressed keys) as vLLM's NIXL
connector moves them, each layer's in a region of its own (docs/execute.md, docs/reference.md §6d, §6e)."""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mambaxfer_cli.engines.vllm import families, indexer_caches
from mambaxfer_cli.engines.vllm.engine import EngineLayout
from mambaxfer_cli.engines.vllm.plan import Plan
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.planning.dtypes import dtype_bytes
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.engines.vllm.reads import VLLM
from mambaxfer_cli.engines.vllm.proof.addresses import expand
from mambaxfer_cli.proof.pattern import PageShape, Part
from mambaxfer_cli.engines.vllm.proof.indexer_caches import (CKEY, PLE_REFUSED, RING, block_pair, cache_pairs,
                                                              holds, unproved)

REGION = "ple"
SPACES = (REGION, RING, CKEY)


@dataclass(frozen=True)
class PageLists:
    """One side's regions of one set of whole pages and the descriptor list over them: ID
    ``j·L + b`` is the page of logical block ``b`` of the ``j``-th layer."""

    first_region: int               # the set's first region's index (after the KV-cache tensors)
    layers: tuple[int, ...]         # the model's layers of the set, one region each (the pattern's layer)
    page_bytes: int                 # the page (PLE: padded)
    logical_blocks: int
    channels: int                   # units of the page: PLE channels, ring slots, compressed keys
    unit_bytes: int                 # one unit
    row_bytes: int                  # one row of a PLE channel (the conv dtype); indexer: the unit
    space: str = REGION             # ple | ring | ckey
    unit: str = "channel"

    @property
    def length(self) -> int:
        return len(self.layers) * self.logical_blocks

    def region(self, layer_index: int) -> int:
        return self.first_region + layer_index

    def shape(self, layer_index: int) -> PageShape:
        """What every page of the set's layer ``layer_index`` holds: all units, then padding (the
        layer's and block's, as ``check`` fills it: the whole page moves, padding included)."""
        layer, state = self.layers[layer_index], self.channels * self.unit_bytes
        parts: tuple[Part, ...] = (Part(self.space, self.unit, 0, self.unit_bytes, 0, self.channels, self.channels,
                                        layer=layer),)
        if self.page_bytes > state:
            parts += (Part("pad", "byte", state, self.page_bytes - state, 0, 1, 1, layer=layer),)
        return PageShape(parts, self.page_bytes)

    def describe(self, offset: int) -> str:
        """What the byte at ``offset`` of a page stands for, as ``check`` names it."""
        if self.space == REGION:
            return holds(offset, self.unit_bytes // self.row_bytes, self.row_bytes, self.channels)
        if offset >= self.channels * self.unit_bytes:
            return "pad byte"
        unit, byte = divmod(offset, self.unit_bytes)
        return f"{self.space} {self.unit} {unit} byte {byte}"

    def rows(self, bases: Sequence[int], dev_id: int, strided: bool) -> np.ndarray:
        """The list as NIXL takes it: ``(layers, 5)`` strided rows, or the ``(length, 3)`` table."""
        out = np.empty((len(self.layers), 5), dtype=np.uint64)
        out[:, 0] = [bases[self.region(j)] for j in range(len(self.layers))]
        out[:, 1], out[:, 2], out[:, 3], out[:, 4] = self.page_bytes, dev_id, self.page_bytes, self.logical_blocks
        return out if strided else expand(out)

    def locate(self, desc_id: int) -> tuple[int, int]:
        """(region, logical block) of one of the list's IDs."""
        layer_index, block = divmod(desc_id, self.logical_blocks)
        return self.region(layer_index), block


@dataclass(frozen=True)
class PageRead:
    """One D rank's reads of one set from one source P rank: IDs into each side's list of the set."""

    p_rank: int
    local_ids: tuple[int, ...]
    remote_ids: tuple[int, ...]


@dataclass(frozen=True)
class WholePage:
    """One D page of the request: ``keep`` bytes of each unit hold the pattern of P's block, every
    other byte what the whole-page read copies from P's page."""

    region: int
    layer_index: int
    block: int                      # D's logical block
    p_block: int                    # P's logical block it is paired with
    keep: int                       # bytes of each unit compared with the pattern


@dataclass(frozen=True)
class SidePages:
    """One set of whole pages as one D rank moves them: both sides' lists, its reads, its pages."""

    lists: PageLists                 # D's
    prefill_lists: PageLists         # each P rank's
    reads: tuple[PageRead, ...]
    pages: tuple[WholePage, ...]

    @property
    def descriptors(self) -> int:
        return sum(len(r.local_ids) for r in self.reads)

    @property
    def bytes(self) -> int:
        return self.descriptors * self.lists.page_bytes


def _ple(model: ModelSpec, side: EngineLayout, first_region: int) -> PageLists | None:
    q = model.ple_qsa
    if q is None or not q.ple_layers:
        return None
    eb = dtype_bytes(model.conv_dtype)
    return PageLists(first_region, tuple(q.ple_layers), families.first("ple_page_bytes", model, side),
                    side.lists.logical_blocks, q.ple_channels, (q.ple_state_len + model.num_spec) * eb, eb)


def _indexer(model: ModelSpec, side: EngineLayout, first_region: int) -> tuple[PageLists, PageLists]:
    found = indexer_caches.caches(model)
    assert found is not None
    layers = model.attention_indices
    slot, ring, key = found.ring_slot_bytes, found.ring_page_bytes, found.key_bytes
    ckey = found.key_page_bytes(side.geometry.block_size)
    blocks = side.lists.logical_blocks
    return (PageLists(first_region, layers, ring, blocks, ring // slot, slot, slot, RING, "slot"),
            PageLists(first_region + len(layers), layers, ckey, blocks, ckey // key, key, key, CKEY, "key"))


def side_lists(plan: Plan, spaces: Sequence[str] = SPACES) -> tuple[tuple[PageLists, PageLists], ...]:
    """(P's, D's) lists of each set of whole pages that moves, in ``SPACES``' order, regions numbered
    after the KV-cache tensors; none where vLLM refuses a set's pages or ``check`` proves none."""
    p_model, model = plan.prefill_model or plan.model, plan.model
    refused = {r.code for r in plan.verdict.refusals}
    out: list[tuple[PageLists, PageLists]] = []
    p_next, d_next = plan.prefill.lists.tensors, plan.decode.lists.tensors
    if REGION in spaces and not refused & set(PLE_REFUSED):
        p_ple, d_ple = _ple(p_model, plan.prefill, p_next), _ple(model, plan.decode, d_next)
        if p_ple is not None and d_ple is not None:
            out.append((p_ple, d_ple))
            p_next, d_next = p_next + len(p_ple.layers), d_next + len(d_ple.layers)
    if (RING in spaces or CKEY in spaces) and unproved(plan) is None:
        pairs = zip(_indexer(p_model, plan.prefill, p_next), _indexer(model, plan.decode, d_next))
        out.extend(pair for pair in pairs if pair[1].space in spaces)
    return tuple(out)


def _whole(lists: tuple[PageLists, PageLists], sources: Sequence[int],
           pairs: Sequence[tuple[int, int]]) -> tuple[PageRead, ...]:
    """Every layer's page of each block pair, whole, from each of ``sources``."""
    p_lists, d_lists = lists
    local = tuple(j * d_lists.logical_blocks + d for j in range(len(d_lists.layers)) for _, d in pairs)
    remote = tuple(j * p_lists.logical_blocks + p for j in range(len(p_lists.layers)) for p, _ in pairs)
    return tuple(PageRead(p, local, remote) for p in sources)


def _indexer_reads(plan: Plan, lists: tuple[PageLists, PageLists], d_rank: int,
                   pairs: Sequence[tuple[int, int]]) -> tuple[PageRead, ...]:
    """D rank ``d_rank``'s reads of one indexer set: whole pages from the sources vLLM (or the exact
    plan) reads them from; a ring vLLM reads in pieces is refused here (``check`` proves it)."""
    space = lists[1].space
    exact = plan.semantics != VLLM
    find = indexer_caches.ring_reads if space == RING else indexer_caches.key_reads
    cache_reads = find(plan.model, plan.prefill, plan.decode, d_rank, exact)
    page = lists[1].page_bytes
    piece = next(((r.p_rank, s) for r in cache_reads for s in r.segments
                  if (s.remote_offset, s.local_offset, s.size) != (0, 0, page)), None)
    if piece is not None:
        (p_rank, segment), found = piece, indexer_caches.caches(plan.model)
        raise UserError(f"this plan cannot be executed: vLLM reads D{d_rank}'s {found.ring_name if found else 'ring'} "
                        f"in pieces ({segment.size} of its {page} bytes from P{p_rank} at offset "
                        f"{segment.remote_offset}), which execute does not move; 'mambaxfer check' proves those reads")
    return _whole(lists, [r.p_rank for r in cache_reads], pairs)


def side_pages(plan: Plan, d_rank: int) -> tuple[SidePages, ...]:
    """Every set of whole pages D rank ``d_rank`` moves: its lists, reads and the request's pages
    (the same on every D rank: the pages are replicated)."""
    out = []
    for p_lists, d_lists in side_lists(plan):
        if d_lists.space == REGION:
            # vLLM reads every PLE layer's whole page from each SSM source P rank (the same bytes
            # from each); the exact plan from the first alone.
            pairs: Sequence[tuple[int, int]] = (block_pair(plan),)
            sources = families.first("ple_sources", plan.prefill, plan.decode, d_rank)
            reads = _whole((p_lists, d_lists), sources if plan.semantics == VLLM else sources[:1], pairs)
            keep = min(p_lists.unit_bytes, d_lists.unit_bytes)
        else:
            pairs = cache_pairs(plan, d_lists.space)
            reads = _indexer_reads(plan, (p_lists, d_lists), d_rank, pairs)
            keep = d_lists.unit_bytes
        pages = tuple(WholePage(d_lists.region(j), j, d, p, keep) for j in range(len(d_lists.layers)) for p, d in pairs)
        out.append(SidePages(d_lists, p_lists, reads, pages))
    return tuple(out)


def with_side(rows: np.ndarray, ids: Sequence[int], plan_length: int, lists: PageLists, bases: Sequence[int],
              dev_id: int, side_ids: Sequence[int]) -> tuple[np.ndarray, array[int]]:
    """A prepared list's rows with a set's descriptors appended after its ``plan_length`` ones (in
    the list's form, strided or not), and the read's IDs with ``side_ids`` appended, shifted past them."""
    extra = lists.rows(bases, dev_id, strided=rows.shape[1] == 5)
    all_ids = array("q", ids)
    all_ids.extend(plan_length + i for i in side_ids)
    return np.concatenate([rows, extra]), all_ids
