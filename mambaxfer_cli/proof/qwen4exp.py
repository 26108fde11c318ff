"""Qwen4Exp's PLE pages proved byte by byte: each P rank's page filled with the pattern (the state
is replicated, so every P rank holds the same bytes), each D rank's page poisoned, the reads
performed as vLLM's connector posts them (the whole page, once per source P rank:
``_build_mamba_local`` / ``_build_mamba_remote``, split per source by ``_build_local_splits_from_plan``
only for the sharded SSM descriptors), and every byte of D's PLE state compared with the pattern
of the channel and row it must hold (the conv state is ``(channels, rows)``, channel-major: vLLM's
DS layout).

mambaxfer's exact plan reads the page once, from the first source P rank; under vLLM semantics
from every source rank. Where vLLM refuses the pages (``ple-geometry``) it posts no read, and
nothing is proved here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from mambaxfer_cli.engines.vllm import qwen4exp
from mambaxfer_cli.engines.vllm.plan import Plan
from mambaxfer_cli.planning.dtypes import dtype_bytes
from mambaxfer_cli.planning.model import ATTENTION, SSM, ModelSpec
from mambaxfer_cli.planning.reads import VLLM, Read
from mambaxfer_cli.proof.pattern import POISON, unit_bytes_pattern
from mambaxfer_cli.proof.simulate import ByteSource, Damage, Simulation, WrongByte

SPACE = "ple"
# vLLM's refusals under which it registers or reads no PLE page.
REFUSED = ("ple-geometry", "ple-without-qsa", "csa-linear-tp")


@dataclass(frozen=True)
class PagesProof:
    """What a proof of whole pages (PLE or QSA) moved and verified, and where it found wrong bytes."""

    reads: int
    bytes_moved: int
    bytes_verified: int
    damage: tuple[Damage, ...]


def _rows(model: ModelSpec) -> int:
    q = model.qwen4exp
    assert q is not None
    return q.ple_state_len + model.num_spec


def _p_page(model: ModelSpec, page_len: int, layer: int, block: int) -> np.ndarray:
    q = model.qwen4exp
    assert q is not None
    unit = _rows(model) * dtype_bytes(model.conv_dtype)
    state = unit_bytes_pattern(layer, block, "ple", 0, q.ple_channels, unit).reshape(-1)
    out = np.empty(page_len, dtype=np.uint8)
    out[:state.size] = state
    if page_len > state.size:       # the page's padding past the state (execute fills it the same way)
        out[state.size:] = unit_bytes_pattern(layer, block, "pad", 0, 1, page_len - state.size).reshape(-1)
    return out


def block_pair(plan: Plan) -> tuple[int, int]:
    """The request's first SSM block on each side (a PLE group is an SSM group)."""
    request = plan.descriptors.request
    for kind, p, d in zip(plan.grouping.groups, request.prefill_blocks, request.decode_blocks):
        if kind == SSM and len(p) and len(d):
            return int(p[0]), int(d[0])
    return 0, 0


def prove_ple(plan: Plan, p_model: ModelSpec | None = None) -> PagesProof | None:
    """The PLE pages of one request block, for every PLE layer and D rank; None for a model
    without PLE state, or where vLLM refuses the pages."""
    model = plan.model
    q = model.qwen4exp
    if q is None or not q.ple_layers:
        return None
    if any(r.code in REFUSED for r in plan.verdict.refusals):
        return None
    p_model = p_model or model
    p_len = qwen4exp.ple_page_bytes(p_model, plan.prefill)
    d_len = qwen4exp.ple_page_bytes(model, plan.decode)
    p_block, d_block = block_pair(plan)
    eb = dtype_bytes(model.conv_dtype)
    p_rows, d_rows = _rows(p_model), _rows(model)
    keep = min(p_rows, d_rows) * eb
    reads = moved = verified = 0
    damage: list[Damage] = []
    for layer in q.ple_layers:
        source = _p_page(p_model, p_len, layer, p_block)    # every P rank's page: replicated bytes
        want = unit_bytes_pattern(layer, p_block, "ple", 0, q.ple_channels, p_rows * eb)[:, :keep]
        for d in range(plan.decode.tp):
            page = np.full(d_len, POISON, dtype=np.uint8)
            writes = np.zeros(d_len, dtype=np.uint16)
            sources = qwen4exp.ple_sources(plan.prefill, plan.decode, d)
            if plan.semantics != VLLM:
                sources = sources[:1]
            for _ in sources:
                n = min(p_len, d_len)
                page[:n] = source[:n]
                writes[:n] += 1
                reads += 1
                moved += n
            got = page[:q.ple_channels * d_rows * eb].reshape(q.ple_channels, d_rows * eb)[:, :keep]
            verified += got.size
            bad = np.argwhere(got != want)
            if bad.size:
                c, k = (int(v) for v in bad[0])
                offset = c * d_rows * eb + k
                first = WrongByte(d, SPACE, layer, d_block, p_block, offset,
                                  f"ple channel {c} row {k // eb} byte {k % eb}", int(want[c, k]),
                                  int(got[c, k]), int(writes[offset]),
                                  ByteSource(sources[-1], SPACE, layer, p_block, offset,
                                             holds(offset, p_rows, eb, q.ple_channels))
                                  if writes[offset] else None)
                damage.append(Damage(d, SPACE, "ple", len(bad), 1, first))
    return PagesProof(reads, moved, verified, tuple(damage))


def holds(offset: int, rows: int, eb: int, channels: int) -> str:
    unit = rows * eb
    if offset >= channels * unit:
        return "pad byte"
    c, k = divmod(offset, unit)
    return f"ple channel {c} row {k // eb} byte {k % eb}"


def merged(sim: Simulation, *proofs: PagesProof | None) -> Simulation:
    """The simulation of a plan's reads with its PLE and QSA pages' proofs added."""
    for proof in proofs:
        if proof is not None:
            sim = Simulation(sim.reads + proof.reads, sim.pairs + proof.reads, sim.bytes_moved + proof.bytes_moved,
                             sim.bytes_verified + proof.bytes_verified, sim.problems, sim.damage + proof.damage)
    return sim


# --- the QSA caches ------------------------------------------------------------------------------

RING, CKEY = qwen4exp.RING, qwen4exp.CKEY
# vLLM's refusals under which no QSA page moves: an engine that does not start, or _nixl_handshake's
# check before any metadata is read.
QSA_REFUSED = ("qsa-ring", "csa-linear-tp")


@dataclass(frozen=True)
class _Cache:
    """One QSA cache as the proof sees it: a page per indexed-attention layer and block, all
    the layers' pages side by side in P's block row (vLLM's block-outermost packing), so a read
    past a page lands in the next layer's page, and past the last one in the rest of the row."""

    space: str
    unit: str               # what one unit of the page is: a ring slot, a compressed key
    unit_bytes: int
    p_page: int
    d_page: int
    reads: Callable[[int], tuple[Read, ...]]      # a D rank's reads of one page

    def p_row(self, layers: tuple[int, ...], p_block: int) -> np.ndarray:
        """P's row of the block: every layer's page, then as many pad bytes as reads may run past."""
        pages = [_pattern_page(self.space, layer, p_block, self.p_page, self.unit_bytes) for layer in layers]
        tail = unit_bytes_pattern(0, p_block, "pad", 0, 1, self.d_page * 4).reshape(-1)
        return np.concatenate(pages + [tail])

    def holds(self, offset: int, layers: tuple[int, ...]) -> tuple[int, str]:
        """The layer whose page holds byte ``offset`` of P's row, and what it holds there."""
        index, at = divmod(offset, self.p_page)
        if index >= len(layers):
            return -1, "pad byte beyond the QSA pages"
        unit, byte = divmod(at, self.unit_bytes)
        if unit * self.unit_bytes + self.unit_bytes > self.p_page:
            return layers[index], "pad byte"
        return layers[index], f"{self.space} {self.unit} {unit} byte {byte}"


def _pattern_page(space: str, layer: int, block: int, page: int, unit_bytes: int) -> np.ndarray:
    units = page // unit_bytes
    out = unit_bytes_pattern(layer, block, space, 0, units, unit_bytes).reshape(-1)
    if out.size < page:
        out = np.concatenate([out, np.full(page - out.size, POISON, dtype=np.uint8)])
    return out


def _caches(plan: Plan, p_model: ModelSpec) -> tuple[_Cache, ...]:
    model, prefill, decode = plan.model, plan.prefill, plan.decode
    exact = plan.semantics != VLLM
    ring = _Cache(RING, "slot", qwen4exp.ring_slot_bytes(model), qwen4exp.ring_page_bytes(p_model),
                  qwen4exp.ring_page_bytes(model),
                  lambda d: qwen4exp.ring_reads(model, prefill, decode, d, exact))
    ckey = _Cache(CKEY, "key", qwen4exp.compressed_key_bytes(model),
                  qwen4exp.compressed_page_bytes(p_model, prefill.geometry.block_size),
                  qwen4exp.compressed_page_bytes(model, decode.geometry.block_size),
                  lambda d: qwen4exp.compressed_reads(model, prefill, decode, d, exact))
    return ring, ckey


def qsa_unproved(plan: Plan) -> str | None:
    """Why the QSA pages of a plan are not proved ("" where vLLM moves none); None where they are."""
    q = plan.model.qwen4exp
    if q is None or not q.has_qsa:
        return ""
    if any(r.code in QSA_REFUSED for r in plan.verdict.refusals):
        return ""
    if plan.prefill.geometry.block_size != plan.decode.geometry.block_size:
        return (f"P's and D's blocks differ ({plan.prefill.geometry.block_size} and "
                f"{plan.decode.geometry.block_size} tokens), and mambaxfer does not model how vLLM pairs "
                f"compressed keys and rings across block sizes")
    p_ring, d_ring = qwen4exp.ring_tokens(plan.prefill_model or plan.model), qwen4exp.ring_tokens(plan.model)
    if p_ring != d_ring:
        return (f"P's and D's raw-key rings differ ({p_ring} and {d_ring} slots: speculative tokens on one "
                f"side), and mambaxfer does not model what D's ring holds when it reads P's")
    return None


def qsa_pairs(plan: Plan, space: str) -> tuple[tuple[int, int], ...]:
    """The request's block pairs (P's, D's) of a QSA cache, in the order D holds them: the
    compressed keys' are the attention blocks; the ring's one block per request is labelled with
    the first of them."""
    request = plan.descriptors.request
    for kind, p, d in zip(plan.grouping.groups, request.prefill_blocks, request.decode_blocks):
        if kind == ATTENTION:
            pairs = tuple(zip((int(b) for b in p), (int(b) for b in d)))
            return pairs[:1] if space == RING else pairs
    return ()


def _land(cache: _Cache, row: np.ndarray, index: int,
          reads: tuple[Read, ...]) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, int]]]:
    """D's page of the ``index``-th layer after ``reads`` (from P's ``row``): its bytes, how many
    writes each byte took, and each segment's (local offset, P rank, row offset - local offset)."""
    page = np.full(cache.d_page, POISON, dtype=np.uint8)
    writes = np.zeros(cache.d_page, dtype=np.uint16)
    shifts = []
    for read in reads:
        for s in read.segments:
            start = index * cache.p_page + s.remote_offset
            page[s.local_offset:s.local_offset + s.size] = row[start:start + s.size]
            writes[s.local_offset:s.local_offset + s.size] += 1
            shifts.append((s.local_offset, read.p_rank, start - s.local_offset))
    return page, writes, shifts


def _wrong_byte(cache: _Cache, layers: tuple[int, ...], d: int, index: int, pair: tuple[int, int], at: int,
                want: np.ndarray, page: np.ndarray, writes: np.ndarray,
                shifts: list[tuple[int, int, int]]) -> WrongByte:
    """D's byte ``at`` of the ``index``-th layer's page, located: the last segment that wrote it."""
    p_block, d_block = pair
    source = None
    if writes[at]:
        _, p_rank, shift = max(x for x in shifts if x[0] <= at)
        s_layer, s_holds = cache.holds(at + shift, layers)
        source = ByteSource(p_rank, cache.space, s_layer, p_block, (at + shift) % cache.p_page, s_holds)
    unit, byte = divmod(at, cache.unit_bytes)
    wants = f"{cache.space} {cache.unit} {unit} byte {byte}"
    return WrongByte(d, cache.space, layers[index], d_block, p_block, at, wants, int(want[at]), int(page[at]),
                     int(writes[at]), source)


def prove_qsa(plan: Plan, p_model: ModelSpec | None = None) -> PagesProof | None:
    """Qwen4Exp's QSA pages of one request, for every indexed-attention layer and D rank: the
    raw-key ring (one block per request: labelled with the request's first attention block pair)
    and the compressed keys of every attention block; None where vLLM moves none or mambaxfer
    does not prove them (``qsa_unproved``)."""
    if qsa_unproved(plan) is not None:
        return None
    model = plan.model
    layers = tuple(i for i, kind in enumerate(model.layers) if kind == ATTENTION)
    reads = moved = verified = 0
    damage: list[Damage] = []
    for cache in _caches(plan, p_model or model):
        blocks = qsa_pairs(plan, cache.space)
        keep = min(cache.p_page, cache.d_page) // cache.unit_bytes * cache.unit_bytes
        for d in range(plan.decode.tp):
            mine = cache.reads(d)
            wrong = pages = 0
            first: WrongByte | None = None
            for pair in blocks:
                row = cache.p_row(layers, pair[0])
                for index in range(len(layers)):
                    page, writes, shifts = _land(cache, row, index, mine)
                    reads, moved, verified = reads + len(mine), moved + sum(r.bytes for r in mine), verified + keep
                    want = row[index * cache.p_page:index * cache.p_page + keep]
                    bad = np.flatnonzero(page[:keep] != want)
                    if bad.size:
                        wrong, pages = wrong + int(bad.size), pages + 1
                        first = first or _wrong_byte(cache, layers, d, index, pair, int(bad[0]), want, page, writes,
                                                     shifts)
            if first is not None:
                damage.append(Damage(d, cache.space, cache.space, wrong, pages, first))
    return PagesProof(reads, moved, verified, tuple(damage))
