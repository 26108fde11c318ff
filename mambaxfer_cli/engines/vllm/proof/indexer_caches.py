"""A sparse-attention indexer's ring and compressed keys proved byte by byte: P's block row filled with
the pattern, D's pages poisoned, the reads performed and every byte of D's pages compared with P's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from mambaxfer_cli.engines.vllm import indexer_caches
from mambaxfer_cli.engines.vllm.plan import Plan
from mambaxfer_cli.engines.vllm.kv_groups import PLE, RING as RING_GROUP
from mambaxfer_cli.planning.model import ATTENTION, SSM, ModelSpec
from mambaxfer_cli.planning.reads import Read
from mambaxfer_cli.engines.vllm.reads import VLLM
from mambaxfer_cli.proof.pattern import POISON, unit_bytes_pattern
from mambaxfer_cli.engines.vllm.proof.simulate import ByteSource, Damage, Simulation, WrongByte

RING, CKEY = indexer_caches.RING, indexer_caches.CKEY
# vLLM's refusals under which no indexer page moves: an engine that does not start (its ring does
# not divide the block), or _nixl_handshake's check before any metadata is read.
REFUSED = ("qsa-ring", "csa-linear-tp", "kpool-ring")
# vLLM's refusals under which it registers or reads no PLE page.
PLE_REFUSED = ("ple-geometry", "ple-without-qsa", "csa-linear-tp")


@dataclass(frozen=True)
class PagesProof:
    """What a proof of whole pages (PLE or QSA) moved and verified, and where it found wrong bytes."""

    reads: int
    bytes_moved: int
    bytes_verified: int
    damage: tuple[Damage, ...]


def merged(sim: Simulation, *proofs: PagesProof | None) -> Simulation:
    """The simulation of a plan's reads with its PLE and QSA pages' proofs added."""
    for proof in proofs:
        if proof is not None:
            sim = Simulation(sim.reads + proof.reads, sim.pairs + proof.reads, sim.bytes_moved + proof.bytes_moved,
                             sim.bytes_verified + proof.bytes_verified, sim.problems, sim.damage + proof.damage)
    return sim


def block_pair(plan: Plan) -> tuple[int, int]:
    """The PLE page's block on each side: the request's first of the PLE group, else (a grouping
    given by hand) of its first SSM group."""
    request = plan.descriptors.request
    sides = list(zip(plan.grouping.groups, request.prefill_blocks, request.decode_blocks))
    found = {kind: (int(p[0]), int(d[0])) for kind, p, d in reversed(sides) if len(p) and len(d)}
    return found.get(PLE) or found.get(SSM) or (0, 0)


def holds(offset: int, rows: int, eb: int, channels: int) -> str:
    """What a PLE page of ``channels`` × ``rows`` elements of ``eb`` bytes holds at byte ``offset``."""
    unit = rows * eb
    if offset >= channels * unit:
        return "pad byte"
    c, k = divmod(offset, unit)
    return f"ple channel {c} row {k // eb} byte {k % eb}"


@dataclass(frozen=True)
class _Cache:
    """One indexer cache as the proof sees it: every layer's page side by side in P's block row, so a
    read past a page lands in the next layer's page, and past the last one in the rest of the row."""

    space: str
    unit: str               # what one unit of the page is: a ring slot, a compressed key
    unit_bytes: int
    p_page: int
    d_page: int
    reads: Callable[[int], tuple[Read, ...]]      # a D rank's reads of one page

    def p_row(self, layers: tuple[int, ...], p_block: int) -> np.ndarray:
        """P's row of the block: every layer's page, then as many pad bytes as reads may run past."""
        units = self.p_page // self.unit_bytes
        gap = np.full(self.p_page - units * self.unit_bytes, POISON, dtype=np.uint8)     # past the last whole unit
        pages = [np.concatenate([unit_bytes_pattern(layer, p_block, self.space, 0, units, self.unit_bytes).reshape(-1),
                                 gap]) for layer in layers]
        tail = unit_bytes_pattern(0, p_block, "pad", 0, 1, self.d_page * 4).reshape(-1)
        return np.concatenate(pages + [tail])

    def holds(self, offset: int, layers: tuple[int, ...]) -> tuple[int, str]:
        """The layer whose page holds byte ``offset`` of P's row, and what it holds there."""
        index, at = divmod(offset, self.p_page)
        if index >= len(layers):
            return -1, "pad byte beyond the indexer pages"
        unit, byte = divmod(at, self.unit_bytes)
        if unit * self.unit_bytes + self.unit_bytes > self.p_page:
            return layers[index], "pad byte"
        return layers[index], f"{self.space} {self.unit} {unit} byte {byte}"


def _caches(plan: Plan, p_model: ModelSpec) -> tuple[_Cache, ...]:
    model, prefill, decode = plan.model, plan.prefill, plan.decode
    exact = plan.semantics != VLLM
    mine, theirs = indexer_caches.caches(model), indexer_caches.caches(p_model)
    assert mine is not None and theirs is not None
    ring = _Cache(RING, "slot", mine.ring_slot_bytes, theirs.ring_page_bytes, mine.ring_page_bytes,
                  lambda d: indexer_caches.ring_reads(model, prefill, decode, d, exact))
    ckey = _Cache(CKEY, "key", mine.key_bytes, theirs.key_page_bytes(prefill.geometry.block_size),
                  mine.key_page_bytes(decode.geometry.block_size),
                  lambda d: indexer_caches.key_reads(model, prefill, decode, d, exact))
    return ring, ckey


def unproved(plan: Plan) -> str | None:
    """Why the indexer pages of a plan are not proved ("" where vLLM moves none); None where
    they are."""
    mine = indexer_caches.caches(plan.model)
    if mine is None:
        return ""
    if any(r.code in REFUSED for r in plan.verdict.refusals):
        return ""
    if plan.prefill.geometry.block_size != plan.decode.geometry.block_size:
        return (f"P's and D's blocks differ ({plan.prefill.geometry.block_size} and "
                f"{plan.decode.geometry.block_size} tokens), and mambaxfer does not model how vLLM pairs "
                f"compressed keys and rings across block sizes")
    theirs = indexer_caches.caches(plan.prefill_model or plan.model)
    assert theirs is not None
    if theirs.key_bytes != mine.key_bytes:
        return (f"P's and D's compressed keys differ ({theirs.key_bytes} and {mine.key_bytes} bytes: "
                f"--attention-config indexer_kv_dtype on one side), and no read converts them")
    if theirs.ring_tokens != mine.ring_tokens:
        return (f"P's and D's {mine.ring_name}s differ ({theirs.ring_tokens} and {mine.ring_tokens} slots: "
                f"speculative tokens on one side), and mambaxfer does not model what D's ring holds when it "
                f"reads P's")
    return None


def cache_pairs(plan: Plan, space: str) -> tuple[tuple[int, int], ...]:
    """The request's block pairs (P's, D's) of an indexer cache: the attention blocks for the keys; the
    ring group's for a ring, or the first attention block's where the ring is no group of the request's."""
    request = plan.descriptors.request
    found: dict[str, tuple[tuple[int, int], ...]] = {}
    for kind, p, d in zip(plan.grouping.groups, request.prefill_blocks, request.decode_blocks):
        found.setdefault(kind, tuple(zip((int(b) for b in p), (int(b) for b in d))))
    if space == RING:
        return found.get(RING_GROUP, found.get(ATTENTION, ())[:1])
    return found.get(ATTENTION, ())


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


def prove(plan: Plan, p_model: ModelSpec | None = None) -> PagesProof | None:
    """The indexer pages of one request, for every indexed-attention layer and D rank; None where
    vLLM moves none or mambaxfer does not prove them (``unproved``)."""
    if unproved(plan) is not None:
        return None
    model = plan.model
    layers = model.attention_indices
    reads = moved = verified = 0
    damage: list[Damage] = []
    for cache in _caches(plan, p_model or model):
        blocks = cache_pairs(plan, cache.space)
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
