"""Invariants over random valid models and TP pairings (hypothesis).

Unit counts and unit sizes are recomputed here from docs/reference.md (§1), not taken from
variants.py, so the layout code is checked against an independent statement of the rules.
"""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings, strategies as st

from mambaxfer_cli.engines.vllm.descriptors import DescriptorList, ListShape, block_ids, kernel_blocks
from mambaxfer_cli.planning.dtypes import DTYPE_BYTES
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.startup import rank_layouts
from mambaxfer_cli.planning.layout import Shard
from mambaxfer_cli.planning.model import ModelSpec, Variant
from mambaxfer_cli.engines.vllm.proof.addresses import resolve
from mambaxfer_cli.proof.pattern import page
from mambaxfer_cli.engines.vllm.proof.pages import ssm_shape
from mambaxfer_cli.engines.vllm.reads import vllm_reads
from mambaxfer_cli.planning.reads import coalesce, exact_reads, misreads, tp_ratio
from strategies import pairings

FAST = settings(max_examples=80, deadline=None)
NAMES = {Variant("mamba1"): ["x", "ssm"], Variant("mamba2"): ["x", "B", "C", "ssm"],
         Variant("gdn"): ["Q", "K", "V", "ssm"], Variant("kda"): ["Q", "K", "V", "ssm"]}


def expected_units(model: ModelSpec) -> dict[str, tuple[int, int]]:
    """Global units and unit bytes of each region, from docs/reference.md §1."""
    p, v = model.params, model.variant
    rows = model.conv_kernel - 1 + (0 if v == Variant("mamba1") else model.num_spec)
    cu = rows * DTYPE_BYTES[model.conv_dtype]
    sb = DTYPE_BYTES[model.ssm_dtype]
    if v == Variant("mamba1"):
        return {"x": (p["intermediate_size"], cu), "ssm": (p["intermediate_size"], p["d_state"] * sb)}
    if v == Variant("mamba2"):
        bc = p["n_groups"] * p["d_state"]
        return {"x": (p["intermediate_size"], cu), "B": (bc, cu), "C": (bc, cu),
                "ssm": (p["num_heads"], p["head_dim"] * p["d_state"] * sb)}
    if v == Variant("kda"):     # kda_state_shape: Q, K, V of H·d channels; (H, d, d) SSM
        hd = p["num_heads"] * p["head_dim"]
        return {"Q": (hd, cu), "K": (hd, cu), "V": (hd, cu), "ssm": (p["num_heads"], p["head_dim"] ** 2 * sb)}
    qk = p["num_k_heads"] * p["head_k_dim"]
    return {"Q": (qk, cu), "K": (qk, cu), "V": (p["num_v_heads"] * p["head_v_dim"], cu),
            "ssm": (p["num_v_heads"], p["head_v_dim"] * p["head_k_dim"] * sb)}


def replicated(model: ModelSpec, name: str, tp: int) -> bool:
    return model.variant == Variant("mamba2") and name in "BC" and model.params["n_groups"] == 1 and tp > 1


@FAST
@given(pairings())
def test_shards_cover_every_unit(case):
    model, p_tp, d_tp = case
    units = expected_units(model)
    for tp in (p_tp, d_tp):
        ranks = rank_layouts(model, tp)
        assert [r.rank for r in ranks] == list(range(tp))
        for name, (count, unit_bytes) in units.items():
            regions = [r.region(name) for r in ranks]
            assert all(reg.unit_bytes == unit_bytes for reg in regions)
            if replicated(model, name, tp):
                assert all(reg.shard == Shard(0, count) for reg in regions)
            else:
                # Exactly once, in rank order.
                edges = [0] + [reg.shard.end for reg in regions]
                assert [reg.shard for reg in regions] == [Shard(a, b) for a, b in zip(edges, edges[1:])]
                assert edges[-1] == count and all(len(reg.shard) == count // tp for reg in regions)


@FAST
@given(pairings())
def test_regions_tile_the_state(case):
    model, p_tp, _ = case
    for layout in rank_layouts(model, p_tp):
        assert [r.name for r in layout.regions] == NAMES[model.variant]
        offset = 0
        for region in layout.regions:
            assert region.offset == offset and region.size == len(region.shard) * region.unit_bytes > 0
            offset = region.end
        assert offset == layout.state_bytes == layout.conv_bytes + layout.ssm_bytes
        assert layout.region("ssm").offset == layout.conv_bytes


def state_page(model, layout, layer: int, block: int) -> np.ndarray:
    """One block's state of a rank (no padding), filled with the pattern."""
    return page(ssm_shape(model, layout, layout.state_bytes), layer, block)


def _apply(model, reads, prefill, decode):
    """Copy every segment between simulated pages; count the writes of each local byte."""
    p_pages = [state_page(model, p, 0, 0) for p in prefill]
    out = [np.zeros(d.state_bytes, dtype=np.uint8) for d in decode]
    writes = [np.zeros(d.state_bytes, dtype=np.int64) for d in decode]
    for read in reads:
        src = p_pages[read.p_rank]
        for s in read.segments:
            assert 0 <= s.remote_offset and s.remote_offset + s.size <= len(src)
            assert 0 <= s.local_offset and s.local_offset + s.size <= len(out[read.d_rank])
            out[read.d_rank][s.local_offset:s.local_offset + s.size] = src[s.remote_offset:s.remote_offset + s.size]
            writes[read.d_rank][s.local_offset:s.local_offset + s.size] += 1
    return out, writes


@FAST
@given(pairings())
def test_exact_reads_reproduce_every_d_state(case):
    model, p_tp, d_tp = case
    prefill, decode = rank_layouts(model, p_tp), rank_layouts(model, d_tp)
    reads = exact_reads(prefill, decode)
    out, writes = _apply(model, reads, prefill, decode)
    for d in decode:
        assert (writes[d.rank] == 1).all()
        assert np.array_equal(out[d.rank], state_page(model, d, 0, 0))
    assert misreads(reads, prefill, decode) == []


@FAST
@given(pairings())
def test_exact_equals_vllm_where_vllm_is_right(case):
    model, p_tp, d_tp = case
    assume(tp_ratio(p_tp, d_tp) is not None
           and not any(replicated(model, n, tp) for n in "BC" for tp in (p_tp, d_tp)))
    prefill, decode = rank_layouts(model, p_tp), rank_layouts(model, d_tp)
    assert exact_reads(prefill, decode) == vllm_reads(prefill, decode)


def _byte_map(read) -> tuple[np.ndarray, np.ndarray]:
    local = np.concatenate([np.arange(s.local_offset, s.local_offset + s.size) for s in read.segments])
    remote = np.concatenate([np.arange(s.remote_offset, s.remote_offset + s.size) for s in read.segments])
    order = np.argsort(local, kind="stable")
    return local[order], remote[order]


@FAST
@given(pairings())
def test_coalesce_preserves_the_byte_mapping(case):
    model, p_tp, d_tp = case
    prefill, decode = rank_layouts(model, p_tp), rank_layouts(model, d_tp)
    reads = exact_reads(prefill, decode)
    if tp_ratio(p_tp, d_tp) is not None:
        try:
            reads += vllm_reads(prefill, decode)
        except UserError:
            # vLLM's pb_i / a: a replicated group of d_state channels need not split into a parts.
            assert any(replicated(model, n, tp) for n in "BC" for tp in (p_tp, d_tp))
    merged = coalesce(reads)
    assert [(r.d_rank, r.p_rank) for r in merged] == [(r.d_rank, r.p_rank) for r in reads]
    for before, after in zip(reads, merged):
        assert len(after.segments) <= len(before.segments)
        for a, b in zip(_byte_map(before), _byte_map(after)):
            assert np.array_equal(a, b)
        for s, t in zip(after.segments, after.segments[1:]):
            assert not (s.remote_offset + s.size == t.remote_offset and s.local_offset + s.size == t.local_offset)
    if p_tp == d_tp:
        # A homogeneous pairing reads one contiguous state per block.
        assert all(len(r.segments) == 1 for r in coalesce(exact_reads(prefill, decode)))


@FAST
@given(pairings())
def test_replicas_hold_identical_bytes(case):
    model, _, d_tp = case
    ranks = rank_layouts(model, d_tp)
    for name in ("B", "C"):
        if replicated(model, name, d_tp):
            chunks = {state_page(model, r, 3, 7)[r.region(name).offset:r.region(name).end].tobytes()
                      for r in ranks}
            assert len(chunks) == 1


@st.composite
def engines(draw):
    tensors = draw(st.integers(1, 4))
    phys = draw(st.integers(1, 4))
    engine = ListShape(tensors=tensors, ssm_tensors=draw(st.integers(1, tensors)),
                    attention_streams=tensors * draw(st.integers(1, 2)),
                    num_blocks=phys * draw(st.integers(1, 12)), blocks_per_logical=phys, ssm_regions=4)
    k = draw(st.integers(1, 4))
    pieces = draw(st.integers(1, 3))
    return DescriptorList(engine, tuple((10 * i, 10) for i in range(k)), tuple((8 * j, 8) for j in range(pieces)))


@FAST
@given(engines(), st.data())
def test_descriptor_ids_resolve_to_their_blocks(lst, data):
    eng = lst.engine
    # Every ID of the list decodes back to itself (docs/reference.md §4's formulas).
    ids = np.arange(lst.length)
    w = resolve(lst, ids)
    L, A, N, n = eng.logical_blocks, lst.attention_descs, eng.num_blocks, lst.pieces
    rebuilt = np.where(w["attention"], (w["tensor"] * N + w["block"]) * n + w["piece"],
                       A + (w["tensor"] * lst.k + w["region"]) * L + w["block"])
    assert np.array_equal(rebuilt, ids)
    # A request's IDs point at exactly its blocks: logical ones for SSM groups, kernel ones for attention.
    groups = data.draw(st.lists(st.sampled_from(["ssm", "attention"]), min_size=1, max_size=3))
    blocks = [np.array(data.draw(st.lists(st.integers(0, L - 1), min_size=1, max_size=3))) for _ in groups]
    # Attention slots: every kernel block of the group's logical blocks, piece 0 (one per block).
    slots = [[slot * n for slot in kernel_blocks(b, eng.blocks_per_logical)] if kind == "attention" else None
             for kind, b in zip(groups, blocks)]
    ids = block_ids(lst, groups, blocks, slots)
    got = resolve(lst, ids)
    expected_blocks = []
    for kind, logical in zip(groups, blocks):
        if kind == "attention":
            kernel = [b * eng.blocks_per_logical + j for b in logical for j in range(eng.blocks_per_logical)]
            expected_blocks += kernel * eng.attention_streams
        else:
            expected_blocks += list(logical) * (eng.ssm_tensors * lst.k)
    assert got["block"].tolist() == expected_blocks
    assert np.all(np.asarray(ids) < lst.length)
