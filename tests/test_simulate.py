"""The byte-level simulation: good plans verify, and every kind of corruption is caught and located."""

from __future__ import annotations

from array import array
from dataclasses import replace

import numpy as np
import pytest

from plan_options import check_options
from mambaxfer_cli.engines.vllm.descriptors import DescriptorRead
from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.engines.vllm.proof.pages import p_attention_shape, request_pages, ssm_shape
from mambaxfer_cli.proof.pattern import page, unit_bytes_pattern
from mambaxfer_cli.engines.vllm.plan import Plan, build_plan
from mambaxfer_cli.engines.vllm.proof.simulate import Patterns, simulate
from mambaxfer_cli.engines.vllm.proof.addresses import resolve


def plan_of(model: str, p_tp: int, d_tp: int, **options) -> Plan:
    return build_plan(load_model(model), p_tp, d_tp, check_options(**options))


def dread(plan: Plan, d_rank: int, p_rank: int) -> DescriptorRead:
    return next(r for r in plan.descriptors.reads if (r.d_rank, r.p_rank) == (d_rank, p_rank))


def with_dread(plan: Plan, old: DescriptorRead, new: DescriptorRead) -> Plan:
    reads = tuple(new if r is old else r for r in plan.descriptors.reads)
    return replace(plan, descriptors=replace(plan.descriptors, reads=reads))


def mutate_segment(plan: Plan, d_rank: int, p_rank: int, region: str, **changes) -> Plan:
    """Change one segment of the plan's reads and rebuild that read's descriptor lists from it."""
    read = next(r for r in plan.reads if (r.d_rank, r.p_rank) == (d_rank, p_rank))
    segments = tuple(replace(s, **changes) if s.region == region else s for s in read.segments)
    assert segments != read.segments
    new_read = replace(read, segments=segments)
    old = dread(plan, d_rank, p_rank)
    new = replace(old,
                  local=replace(old.local, regions=tuple((s.local_offset, s.size) for s in segments)),
                  remote=replace(old.remote, regions=tuple((s.remote_offset, s.size) for s in segments)))
    plan = replace(plan, reads=tuple(new_read if r is read else r for r in plan.reads))
    return with_dread(plan, old, new)


def codes(sim) -> set[str]:
    return {p.code for p in sim.problems}


# --- the pattern as the simulation generates it -------------------------------------------------

@pytest.mark.parametrize("model,tp", [("granite-4.0-h-tiny", 2), ("jamba", 4), ("qwen3.5-0.8b", 1),
                                      ("mamba-130m", 3)])
def test_pages_assembled_from_whole_regions_equal_the_pattern_of_each_region(model, tp):
    spec, patterns = load_model(model), Patterns()
    plan = plan_of(model, 1, tp)
    for layout in plan.decode.ranks:
        size = plan.decode.page_bytes
        for layer, block in ((0, 7), (3, 1234)):
            # Built here from the layout's regions, independently of PageShape and the cache.
            expected = np.concatenate(
                [unit_bytes_pattern(layer, block, r.name, r.shard.start, len(r.shard), r.unit_bytes).ravel()
                 for r in layout.regions]
                + [unit_bytes_pattern(layer, block, "pad", 0, 1, size - layout.state_bytes).ravel()])
            shape = ssm_shape(spec, layout, size)
            assert np.array_equal(patterns.page(shape, layer, block), expected)
            assert np.array_equal(page(shape, layer, block), expected)


def test_attention_pages_hold_each_ranks_kv_heads_token_by_token():
    spec, patterns = load_model("jamba"), Patterns()       # 8 KV heads of 128, bf16: 512 bytes a token
    for tp, rank, first, heads in ((1, 0, 0, 8), (4, 3, 6, 2), (8, 5, 5, 1)):
        side = plan_of("jamba", tp, tp).prefill
        kernel = side.kernel_tokens                        # 80 tokens at every TP (Jamba scales evenly)
        shape = p_attention_shape(spec, side, rank, 1, 42)
        assert shape.page_bytes == side.page_bytes == kernel * heads * 512
        # Head after head, each its tokens: unit h·kernel + t of P kernel block 42 (1 per logical block).
        expected = np.concatenate([unit_bytes_pattern(1, 42, "kv", h * kernel, kernel, 512).ravel()
                                   for h in range(first, first + heads)])
        assert np.array_equal(patterns.page(shape, 1, 42), expected)


def test_request_pages_pair_each_d_block_with_its_p_block():
    plan = plan_of("jamba", 1, 2, request_blocks=2)
    request, desc = plan.descriptors.request, plan.descriptors
    pages = request_pages(plan, 0)
    ssm = [p for p in pages if p.kind == "ssm"]
    attention = [p for p in pages if p.kind == "attention"]
    assert len(ssm) == 7 * 2 * desc.decode.ssm_tensors          # 7 SSM groups, 2 blocks, 4 tensors
    assert len(attention) == 1 * 2 * desc.decode.tensors        # 2 logical blocks in each of 4 tensors
    assert (ssm[0].block, ssm[0].p_block) == (int(request.decode_blocks[0][0]), int(request.prefill_blocks[0][0]))
    pb, db = int(request.prefill_blocks[7][1]), int(request.decode_blocks[7][1])
    page_ = next(a for a in attention if (a.tensor, a.block) == (0, db))
    assert {part.block for part in page_.shape.parts} == {pb}   # one kernel block a logical block, both sides


# --- good plans verify --------------------------------------------------------------------------

@pytest.mark.parametrize("model,p_tp,d_tp,options", [
    ("jamba", 1, 4, {}), ("jamba", 4, 1, {}), ("nemotron-h-8b", 2, 8, {}), ("qwen3.5-0.8b", 2, 1, {}),
    ("granite-4.0-h-tiny", 1, 2, {}), ("granite-4.0-h-tiny", 4, 2, {"request_blocks": 2}),
    ("mamba-130m", 2, 3, {}), ("mamba-130m", 6, 4, {"coalesce": True}),
    ("qwen3-next-80b", 4, 8, {"attention_streams": 2}), ("mamba-codestral-7b", 8, 1, {"coalesce": True}),
    ("jamba", 2, 2, {"seed": 7, "request_blocks": 3}),
])
def test_good_plans_verify_every_byte(model, p_tp, d_tp, options):
    plan = plan_of(model, p_tp, d_tp, **options)
    sim = simulate(plan)
    assert sim.ok, (sim.problems, sim.damage[:2])
    state = sum(r.state_bytes for r in plan.decode.ranks)
    assert sim.bytes_verified >= state          # at least one page per D rank, all of them checked
    assert sim.pairs == sum(len(r.local_ids) for r in plan.descriptors.reads)


def test_engines_with_different_blocks_per_logical_verify():
    # FLASHINFER with prefix caching: P blocks of 576 tokens in 9 kernel blocks, D of 320 in 5.
    flags = EngineFlags(attention_backend="FLASHINFER", num_blocks=4096)
    plan = plan_of("qwen3.5-0.8b", 1, 4, prefill=flags, decode=flags, request_blocks=2)
    assert (plan.prefill.geometry.blocks_per_logical, plan.decode.geometry.blocks_per_logical) == (9, 5)
    assert simulate(plan).ok


# --- vLLM's replicated-groups bug, located ------------------------------------------------------

def test_vllm_granite_p_tp1_d_tp2_c_read_as_b_and_temporal_read_as_c():
    plan = plan_of("granite-4.0-h-tiny", 1, 2, semantics="vllm")
    sim = simulate(plan)
    assert not sim.ok and codes(sim) == set()       # the IDs are fine, the bytes are not
    found = {(d.d_rank, d.region): d.first for d in sim.damage}
    assert set(found) == {(0, "C"), (1, "B"), (1, "C")}
    assert found[0, "C"].reason == "temporal bytes read as C"
    assert found[1, "B"].reason == "C read as B"
    assert found[1, "C"].reason == "temporal bytes read as C"
    first = sim.first_wrong
    d0 = plan.decode.ranks[0]
    assert (first.d_rank, first.offset) == (0, d0.region("C").offset)
    assert first.wants == "C channel 0 byte 0"
    assert first.source.p_rank == 0 and first.source.offset == plan.prefill.ranks[0].region("ssm").offset
    assert first.source.holds == "ssm head 0 byte 0"
    b = found[1, "B"]
    assert b.source.holds == "C channel 0 byte 0"
    # What D1 found in B is exactly what C channel 0 must hold: C's bytes, read as B.
    c_expected = Patterns().rows(b.tensor, b.p_block, ssm_shape(plan.model, d0, 0).parts[2])
    assert b.found == int(c_expected[0, 0])


# --- mutations of a good plan: each is caught and named -----------------------------------------

def test_mutated_segment_offset_reads_the_next_unit():
    plan = plan_of("jamba", 1, 4)
    d2 = plan.decode.ranks[2]
    ssm = d2.region("ssm")
    seg = next(s for r in plan.reads if r.d_rank == 2 for s in r.segments if s.region == "ssm")
    bad = mutate_segment(plan, 2, 0, "ssm", remote_offset=seg.remote_offset + ssm.unit_bytes)
    sim = simulate(bad)
    assert not sim.ok and codes(sim) == set()
    assert [(d.d_rank, d.region) for d in sim.damage] == [(2, "ssm")]
    first = sim.first_wrong
    assert first.offset == ssm.offset
    assert first.wants == f"ssm channel {ssm.shard.start} byte 0"
    assert first.source.p_rank == 0 and first.source.offset == seg.remote_offset + ssm.unit_bytes
    assert first.reason == f"channel {ssm.shard.start + 1} read as channel {ssm.shard.start}"


def test_mutated_segment_size_leaves_the_last_unit_poisoned():
    plan = plan_of("jamba", 1, 4)
    x = plan.decode.ranks[1].region("x")
    bad = mutate_segment(plan, 1, 0, "x", size=x.size - x.unit_bytes)
    sim = simulate(bad)
    assert codes(sim) == {"write-count"}
    assert [(d.d_rank, d.region) for d in sim.damage] == [(1, "x")]
    first = sim.first_wrong
    assert first.offset == x.end - x.unit_bytes and first.writes == 0 and first.source is None
    assert first.wants == f"x channel {x.shard.end - 1} byte 0"
    assert first.reason == "never written" and "never written (poisoned)" in first.describe()


def test_remote_size_alone_mutated_is_an_id_size_error_and_the_read_is_refused():
    plan = plan_of("jamba", 1, 4)
    old = dread(plan, 1, 0)
    regions = ((old.remote.regions[0][0], old.remote.regions[0][1] - 6),) + old.remote.regions[1:]
    sim = simulate(with_dread(plan, old, replace(old, remote=replace(old.remote, regions=regions))))
    size = [p for p in sim.problems if p.code == "id-size"]
    assert len(size) == 1 and size[0].d_rank == 1 and "12288 bytes but remote ID" in size[0].message
    assert {d.d_rank for d in sim.damage} == {1}     # nothing of D1 was written
    assert all(d.first.reason == "never written" for d in sim.damage)


def test_mutated_source_rank_reads_another_p_ranks_units():
    plan = plan_of("jamba", 4, 1)
    old = dread(plan, 0, 2)
    read = next(r for r in plan.reads if r.p_rank == 2)
    bad = with_dread(plan, old, replace(old, p_rank=3))
    bad = replace(bad, reads=tuple(replace(r, p_rank=3) if r is read else r for r in bad.reads))
    sim = simulate(bad)
    assert not sim.ok
    assert {(d.d_rank, d.region) for d in sim.damage} == {(0, "x"), (0, "ssm"), (0, "kv")}
    first = sim.first_wrong
    x = plan.decode.ranks[0].region("x")
    wanted = plan.prefill.ranks[2].region("x").shard.start
    got = plan.prefill.ranks[3].region("x").shard.start
    assert first.offset == x.offset + wanted * x.unit_bytes
    assert first.source.p_rank == 3 and first.reason == f"channel {got} read as channel {wanted}"
    # and the plan now has two descriptor reads from P3 where its reads say otherwise
    assert "reads-descriptors" in codes(sim)


def test_local_id_moved_to_another_block_writes_outside_the_request():
    plan = plan_of("qwen3.5-0.8b", 2, 1)
    old = dread(plan, 0, 1)
    ids = array("q", old.local_ids)
    ids[0] += 1                                     # the same region, the next logical block
    sim = simulate(with_dread(plan, old, replace(old, local_ids=ids)))
    assert {"outside-request", "write-count"} <= codes(sim)
    info = resolve(old.local, old.local_ids[:1])
    stray = next(p for p in sim.problems if p.code == "outside-request")
    assert f"block {int(info['block'][0]) + 1}" in stray.message
    first = sim.first_wrong
    assert (first.tensor, first.block, first.offset) == (int(info["tensor"][0]), int(info["block"][0]),
                                                        int(info["offset"][0]))
    assert first.reason == "never written"


def test_remote_id_moved_to_another_block_reads_that_blocks_bytes():
    plan = plan_of("qwen3.5-0.8b", 2, 1)
    old = dread(plan, 0, 0)
    ids = array("q", old.remote_ids)
    ids[3] += 1
    sim = simulate(with_dread(plan, old, replace(old, remote_ids=ids)))
    assert codes(sim) == set()
    p_block = int(resolve(old.remote, old.remote_ids[3:4])["block"][0])
    assert len(sim.damage) == 1
    first = sim.first_wrong
    assert first.p_block == p_block and first.source.block == p_block + 1
    assert first.reason == f"block {p_block + 1} read instead of {p_block}"


def test_id_outside_its_list_and_repeated_ids_are_named():
    plan = plan_of("qwen3.5-0.8b", 2, 1)
    old = dread(plan, 0, 1)
    ids = array("q", old.local_ids)
    ids[0] = old.local.length
    sim = simulate(with_dread(plan, old, replace(old, local_ids=ids)))
    assert "id-range" in codes(sim)
    assert f"local ID {old.local.length} is outside its list of {old.local.length}" in \
        next(p.message for p in sim.problems if p.code == "id-range")

    ids = array("q", old.local_ids)
    ids[1] = ids[0]
    sim = simulate(with_dread(plan, old, replace(old, local_ids=ids)))
    assert {"id-duplicate", "write-count"} <= codes(sim)
    assert any(d.first.reason == "written 2 times" for d in sim.damage)


def test_unequal_id_lists_are_refused():
    plan = plan_of("jamba", 1, 2)
    old = dread(plan, 1, 0)
    sim = simulate(with_dread(plan, old, replace(old, remote_ids=old.remote_ids[:-1])))
    problem = next(p for p in sim.problems if p.code == "id-length")
    assert (problem.d_rank, problem.p_rank) == (1, 0)
    assert f"{len(old.local_ids)} local IDs but {len(old.local_ids) - 1} remote IDs" in problem.message


def test_attention_slot_offset_mutated_reads_the_other_head():
    plan = plan_of("qwen3.5-0.8b", 1, 2)                  # 2 KV heads: D1 holds head 1
    old = dread(plan, 1, 0)
    head = plan.prefill.kernel_tokens * 2 * 256 * 2       # one head's tokens: K and V of 256, bf16
    assert plan.prefill.kernel_tokens == plan.decode.kernel_tokens == 576
    assert old.remote.attention == ((head, head),)
    bad = replace(old, remote=replace(old.remote, attention=((0, head),)))
    sim = simulate(with_dread(plan, old, bad))
    assert [(d.d_rank, d.space, d.region) for d in sim.damage] == [(1, "attention", "kv")]
    assert sim.first_wrong.reason == "head 0 read as head 1"


def test_reads_changed_without_their_descriptors_are_inconsistent():
    plan = plan_of("jamba", 1, 2)
    read = plan.reads[0]
    changed = replace(read, segments=(replace(read.segments[0], remote_offset=6),) + read.segments[1:])
    sim = simulate(replace(plan, reads=(changed,) + plan.reads[1:]))
    assert codes(sim) == {"reads-descriptors"} and not sim.damage


def test_descriptor_beyond_registered_memory_is_not_copied():
    plan = plan_of("mamba-130m", 1, 1)
    old = dread(plan, 0, 0)
    huge = plan.page_bytes[0] * plan.descriptors.prefill.logical_blocks
    regions = ((huge, old.remote.regions[0][1]),) + old.remote.regions[1:]
    sim = simulate(with_dread(plan, old, replace(old, remote=replace(old.remote, regions=regions))))
    assert "outside-memory" in codes(sim)
    assert sim.first_wrong.reason == "never written"


def test_local_overrun_spills_into_the_next_block():
    from mambaxfer_cli.planning.model import ModelSpec, Variant

    tiny = ModelSpec("tiny", "test", Variant("mamba1"), {"intermediate_size": 5, "d_state": 3}, ("ssm",),
                     conv_kernel=4, num_spec=0, conv_dtype="bfloat16", ssm_dtype="bfloat16")
    plan = build_plan(tiny, 1, 1, check_options())
    assert plan.page_bytes == (60, 60)             # an SSM-only engine's page is the state
    old = dread(plan, 0, 0)
    (x_off, x_size), (s_off, s_size) = old.local.regions
    assert (x_size, s_off, s_size) == (30, 30, 30)
    local = replace(old.local, regions=((x_off, x_size), (60 - 10, s_size)))   # 20 B spill into block + 1
    sim = simulate(with_dread(plan, old, replace(old, local=local)))
    assert {"outside-request", "write-count"} <= codes(sim)
    counted = next(p.message for p in sim.problems if p.code == "write-count")
    assert counted == "D0: 20 bytes never written"
    stray = next(p.message for p in sim.problems if p.code == "outside-request")
    assert stray.startswith("D0: 20 bytes written outside the request's blocks")


def test_attention_descriptor_straying_into_the_next_block_is_caught():
    # In vLLM's shared tensors a kernel block's neighbour is another block of the pool, which an
    # SSM group or another request may own: a piece shifted by one kernel block writes there.
    plan = plan_of("jamba", 1, 2)
    old = dread(plan, 0, 0)
    (offset, size), = old.local.attention
    kernel = plan.decode.kernel_block_bytes
    bad = replace(old, local=replace(old.local, attention=((offset + kernel, size),)))
    sim = simulate(with_dread(plan, old, bad))
    assert "outside-request" in codes(sim) or "write-count" in codes(sim)
    assert [(d.d_rank, d.space, d.region, d.first.reason) for d in sim.damage if d.d_rank == 0] == [
        (0, "attention", "kv", "never written")]
