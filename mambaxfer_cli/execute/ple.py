"""Qwen4Exp's PLE pages in an execute run, moved as vLLM's NIXL connector moves them.

Memory: after the KV-cache tensors, one more registered region per PLE layer, the engine's logical
blocks as pages of the PLE page (``_ple_block_len``: the padded page), each holding the layer's
whole state (TP-replicated: every rank holds all channels), channel-major ``(channels, rows)``
(vLLM's DS layout), then padding. vLLM keeps that page in a KV-cache tensor it shares with other
groups' pages; a region of its own holds the same bytes at the same offsets in the page and leaves
the plan's lists as they are.

Reads: as ``_build_mamba_local`` / ``_build_mamba_remote`` append them, the PLE descriptors follow
the plan's attention and SSM descriptors in every prepared list (``[attention | SSM | PLE]``): one
per PLE layer and logical block, the whole page, the same in split lists (only the sharded SSM
descriptors are split). Each D rank reads the page of the request's SSM block (the block
``proof/qwen4exp.py`` proves) from every SSM source P rank under vLLM semantics
(``compute_tp_mapping``), from the first one under the exact semantics, and from none where vLLM
refuses the pages, where ``check`` proves nothing either.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mambaxfer_cli.engines.vllm import qwen4exp
from mambaxfer_cli.engines.vllm.engine import EngineLayout
from mambaxfer_cli.engines.vllm.plan import Plan
from mambaxfer_cli.planning.dtypes import dtype_bytes
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.planning.reads import VLLM
from mambaxfer_cli.proof.addresses import expand
from mambaxfer_cli.proof.pattern import PageShape, Part
from mambaxfer_cli.proof.qwen4exp import REFUSED, block_pair, holds

REGION = "ple"


@dataclass(frozen=True)
class PleLists:
    """One side's PLE regions and the descriptor list over them: ID ``j·L + b`` is the page of
    logical block ``b`` of the ``j``-th PLE layer."""

    first_region: int               # the first PLE region's index (after the KV-cache tensors)
    layers: tuple[int, ...]         # the model's PLE layers, one region each (the pattern's layer)
    page_bytes: int                 # the PLE page (padded)
    logical_blocks: int
    channels: int
    unit_bytes: int                 # one channel's rows
    row_bytes: int                  # one row of a channel (the conv dtype)

    @property
    def length(self) -> int:
        return len(self.layers) * self.logical_blocks

    def region(self, layer_index: int) -> int:
        return self.first_region + layer_index

    def shape(self, layer_index: int) -> PageShape:
        """What every page of PLE layer ``layer_index`` holds: all channels, then padding (the PLE
        layer's and block's, as ``check`` fills it: the whole page moves, padding included)."""
        layer, state = self.layers[layer_index], self.channels * self.unit_bytes
        parts: tuple[Part, ...] = (Part(REGION, "channel", 0, self.unit_bytes, 0, self.channels, self.channels,
                                        layer=layer),)
        if self.page_bytes > state:
            parts += (Part("pad", "byte", state, self.page_bytes - state, 0, 1, 1, layer=layer),)
        return PageShape(parts, self.page_bytes)

    def describe(self, offset: int) -> str:
        """What the byte at ``offset`` of a page stands for, as ``check`` names it."""
        return holds(offset, self.unit_bytes // self.row_bytes, self.row_bytes, self.channels)

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
class PleRead:
    """One D rank's PLE reads from one source P rank: IDs into each side's PLE list."""

    p_rank: int
    local_ids: tuple[int, ...]
    remote_ids: tuple[int, ...]


@dataclass(frozen=True)
class PlePage:
    """One D PLE page of the request and what it must hold: the channels' rows both sides keep
    (``keep`` bytes of each) the pattern of P's block, and every other byte of the page what the
    whole-page read copies from P's page, at the same offset."""

    region: int
    layer_index: int
    block: int                      # D's logical block
    p_block: int                    # P's logical block it is paired with
    keep: int                       # bytes of each channel compared with the pattern


def _lists(model: ModelSpec, side: EngineLayout) -> PleLists | None:
    q = model.qwen4exp
    if q is None or not q.ple_layers:
        return None
    eb = dtype_bytes(model.conv_dtype)
    return PleLists(side.lists.tensors, tuple(q.ple_layers), qwen4exp.ple_page_bytes(model, side),
                    side.lists.logical_blocks, q.ple_channels, (q.ple_state_len + model.num_spec) * eb, eb)


def ple_lists(plan: Plan) -> tuple[PleLists, PleLists] | None:
    """P's and D's PLE lists; None without PLE state or where vLLM refuses the pages (it then
    registers or reads none of them)."""
    if any(r.code in REFUSED for r in plan.verdict.refusals):
        return None
    p_lists = _lists(plan.prefill_model or plan.model, plan.prefill)
    d_lists = _lists(plan.model, plan.decode)
    if p_lists is None or d_lists is None:
        return None
    return p_lists, d_lists


def ple_reads(plan: Plan, d_rank: int) -> tuple[PleRead, ...]:
    """D rank ``d_rank``'s PLE reads: the whole page of every PLE layer at the request's SSM block
    pair, once per SSM source P rank under vLLM semantics, once from the first under the exact."""
    lists = ple_lists(plan)
    if lists is None:
        return ()
    p_lists, d_lists = lists
    p_block, d_block = block_pair(plan)
    sources = qwen4exp.ple_sources(plan.prefill, plan.decode, d_rank)
    if plan.semantics != VLLM:
        sources = sources[:1]
    local = tuple(j * d_lists.logical_blocks + d_block for j in range(len(d_lists.layers)))
    remote = tuple(j * p_lists.logical_blocks + p_block for j in range(len(p_lists.layers)))
    return tuple(PleRead(p, local, remote) for p in sources)


def ple_pages(plan: Plan) -> tuple[PlePage, ...]:
    """The D PLE pages of the request (the same on every D rank: the state is replicated)."""
    lists = ple_lists(plan)
    if lists is None:
        return ()
    p_lists, d_lists = lists
    p_block, d_block = block_pair(plan)
    keep = min(p_lists.unit_bytes, d_lists.unit_bytes)
    return tuple(PlePage(d_lists.region(j), j, d_block, p_block, keep) for j in range(len(d_lists.layers)))


def with_ple(rows: np.ndarray, ids: Sequence[int], plan_length: int, lists: PleLists, bases: Sequence[int],
             dev_id: int, ple_ids: Sequence[int]) -> tuple[np.ndarray, array[int]]:
    """A prepared list's rows with the PLE descriptors appended after its ``plan_length`` ones (in
    the list's form, strided or not), and the read's IDs with ``ple_ids`` appended, shifted past them."""
    extra = lists.rows(bases, dev_id, strided=rows.shape[1] == 5)
    all_ids = array("q", ids)
    all_ids.extend(plan_length + i for i in ple_ids)
    return np.concatenate([rows, extra]), all_ids
