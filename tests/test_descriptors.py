"""descriptors: prepared lists and descriptor IDs (docs/reference.md §4)."""

from __future__ import annotations

import numpy as np
import pytest

from mambaxfer_cli.engines.vllm.descriptors import (
    DescriptorList, ListShape, block_ids as slot_ids, kernel_blocks, list_shape, parse_blocks, random_request,
)
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.engines.vllm.kv_groups import vllm_grouping
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.engines.vllm.plan import PlanOptions, build_plan
from mambaxfer_cli.engines.vllm.releases import release
from mambaxfer_cli.engines.vllm.proof.addresses import address_table, addresses, resolve

V0_33 = release("0.33")


def vllm_mock_list(num_blocks: int, phys: int) -> DescriptorList:
    """vLLM's unit-test worker: F = 2 attention streams, one SSM tensor with k = 4 regions."""
    engine = ListShape(tensors=2, ssm_tensors=1, attention_streams=2, num_blocks=num_blocks,
                    blocks_per_logical=phys, ssm_regions=4)
    return DescriptorList(engine, regions=((0, 8), (8, 8), (16, 8), (24, 8)), attention=((0, 64),))


def block_ids(lst: DescriptorList, groups, blocks, with_attention: bool) -> np.ndarray:
    """IDs of a read that takes each attention kernel block whole (one piece), as vLLM's lists do."""
    slots = [kernel_blocks(np.asarray(b), lst.engine.blocks_per_logical) if kind == "attention" and with_attention
             else None for kind, b in zip(groups, blocks)]
    return slot_ids(lst, groups, [np.asarray(b) for b in blocks], slots)


def test_vllm_unit_test_ids_phys_1():
    ids = block_ids(vllm_mock_list(100, 1), ["attention", "ssm"], [[3, 5], [1, 2]], with_attention=True)
    assert ids.tolist() == [3, 5, 103, 105, 201, 202, 301, 302, 401, 402, 501, 502]


def test_vllm_unit_test_ids_phys_4():
    # vLLM's test hands the attention group kernel-block IDs (3, 7) directly, while block_ids takes
    # logical blocks and expands each to its phys kernel blocks. Attention IDs f*N + b do not
    # otherwise depend on phys, so the attention part is block_ids on the same N with phys = 1;
    # the SSM part uses phys = 4: L = 400 // 4 = 100 logical blocks, SSM IDs start at F*N = 800.
    attention = block_ids(vllm_mock_list(400, 1), ["attention"], [[3, 7]], with_attention=True)
    ssm = block_ids(vllm_mock_list(400, 4), ["ssm"], [[1, 2]], with_attention=True)
    assert np.concatenate([attention, ssm]).tolist() == [3, 7, 403, 407, 801, 802, 901, 902, 1001, 1002,
                                                         1101, 1102]
    # With phys = 4 a logical attention block b covers kernel blocks 4b .. 4b+3 of each stream.
    expanded = block_ids(vllm_mock_list(400, 4), ["attention"], [[0, 1]], with_attention=True)
    assert expanded.tolist() == list(range(8)) + list(range(400, 408))


def test_engine_sizes():
    lst = vllm_mock_list(400, 4)
    eng = lst.engine
    assert (eng.logical_blocks, eng.attention_descs, eng.ssm_descs()) == (100, 800, 400)
    assert lst.length == 1200
    assert eng.to_dict() == {"tensors": 2, "ssm_tensors": 1, "attention_streams": 2, "num_blocks": 400,
                             "blocks_per_logical": 4, "attention_descs": 800, "ssm_descs": 400}


def test_ids_skip_attention_for_a_non_source():
    ids = block_ids(vllm_mock_list(100, 1), ["attention", "ssm"], [[3, 5], [1, 2]], with_attention=False)
    assert ids.tolist() == [201, 202, 301, 302, 401, 402, 501, 502]


def test_ids_with_several_ssm_tensors_are_tensor_then_region_major():
    engine = ListShape(tensors=2, ssm_tensors=2, attention_streams=2, num_blocks=10, blocks_per_logical=2,
                    ssm_regions=2)
    lst = DescriptorList(engine, ((0, 4), (4, 4)), ((0, 64),))
    # F*N = 20, L = 5: q = tensor * 2 + region.
    assert block_ids(lst, ["ssm", "ssm"], [[1], [3]], True).tolist() == [21, 26, 31, 36, 23, 28, 33, 38]


def test_table_and_resolve_agree_with_the_formula():
    engine = ListShape(tensors=2, ssm_tensors=2, attention_streams=2, num_blocks=8, blocks_per_logical=2,
                    ssm_regions=2)
    lst = DescriptorList(engine, ((0, 10), (10, 20)), ((16, 32),))
    bases, page = [100_000, 200_000], 100            # one region per KV-cache tensor, pages of 100 B
    kernel = page // 2                               # 2 kernel blocks a logical block, in the same page
    table = address_table(lst, bases, page, dev_id=3)
    assert table.shape == (lst.length, 3) == (16 + 2 * 2 * 4, 3)
    expected = []
    for f in range(2):                                   # F*N attention descriptors, stream-major
        for b in range(8):
            expected.append((bases[f] + b * kernel + 16, 32, 3))
    for t in range(2):                                   # then tensor, region, logical block
        for offset, size in lst.regions:
            for b in range(4):
                expected.append((bases[t] + offset + b * page, size, 3))
    assert [tuple(int(v) for v in row) for row in table] == expected

    ids = np.arange(lst.length)
    where = resolve(lst, ids)
    assert where["attention"].tolist() == [True] * 16 + [False] * 16
    assert where["region"].tolist() == [-1] * 16 + ([0] * 4 + [1] * 4) * 2
    assert where["block"].tolist() == list(range(8)) * 2 + list(range(4)) * 4
    assert where["tensor"].tolist() == [0] * 8 + [1] * 8 + [0] * 8 + [1] * 8
    assert where["offset"].tolist() == [16] * 16 + ([0] * 4 + [10] * 4) * 2
    # Attention kernel block k and SSM block k // 2 of the same tensor share its memory.
    tensor, offset, _ = addresses(lst, np.array([3, 16 + 1]), page)
    assert tensor.tolist() == [0, 0] and offset.tolist() == [3 * kernel + 16, page + 0]


def test_pieces_number_attention_ids_within_a_kernel_block():
    engine = ListShape(tensors=1, ssm_tensors=1, attention_streams=1, num_blocks=10, blocks_per_logical=1,
                    ssm_regions=1)
    lst = DescriptorList(engine, ((0, 4),), ((0, 8), (8, 8), (16, 8)))   # 3 pieces a kernel block
    assert lst.attention_descs == 30 and lst.length == 40
    where = resolve(lst, np.array([0, 1, 2, 3, 29, 30]))
    assert where["block"].tolist() == [0, 0, 0, 1, 9, 0]
    assert where["piece"].tolist() == [0, 1, 2, 0, 2, -1]
    assert where["offset"].tolist() == [0, 8, 16, 0, 16, 0]


def test_jamba_p_tp1_d_tp4_descriptor_ids_by_hand():
    # Jamba's grouping: 7 SSM groups then 1 attention group, 4 tensors; one attention stream per
    # tensor gives F = 4; k = 2 (x, ssm). Derived geometry (vLLM 0.33): 80-token blocks of one kernel
    # block on both sides (see test_geometry), so P: N = L = 1000; D: N = L = 2000.
    # Request: group g uses P logical block 5 + g and D logical block 7 + g.
    opts = PlanOptions(prefill=EngineFlags(release=V0_33, num_blocks=1000),
                       decode=EngineFlags(release=V0_33, num_blocks=2000),
                       prefill_blocks="5;6;7;8;9;10;11;12", decode_blocks="7;8;9;10;11;12;13;14")
    plan = build_plan(load_model("jamba"), 1, 4, opts)
    dmap = plan.descriptors
    assert dmap.groups == ("ssm",) * 7 + ("attention",)
    assert [(r.d_rank, r.p_rank, r.local_list, r.local.k, r.attention) for r in dmap.reads] == [
        (d, 0, "base", 2, True) for d in range(4)]
    # SSM group g: q = tensor * 2 + region for 4 tensors; local F*N + q*L + 7 + g = 8007 + g + 2000 q,
    # remote 4000 + 1000 q + 5 + g.
    local_ssm = [8007 + g + 2000 * q for g in range(7) for q in range(8)]
    remote_ssm = [4005 + g + 1000 * q for g in range(7) for q in range(8)]
    # Attention logical block 14 -> kernel block 14 per stream f: f*2000 + 14 (P: 12, f*1000 + 12).
    local_attn = [f * 2000 + 14 for f in range(4)]
    remote_attn = [f * 1000 + 12 for f in range(4)]
    for read in dmap.reads:
        assert read.local_ids.tolist() == local_ssm + local_attn
        assert read.remote_ids.tolist() == remote_ssm + remote_attn
    # The remote list of D rank 2 points at its slice of P's page (x at 2 * 12288, ssm at
    # 49152 + 2 * 65536); attention: P holds 8 KV heads, D rank 2 heads 4..5, each head 80 tokens
    # of K and V (2 * 128 * 2 bytes a token): 40960 bytes a head in a kernel block.
    r2 = dmap.reads[2]
    assert r2.remote.regions == ((24576, 12288), (180224, 65536))
    assert r2.local.regions == ((0, 12288), (12288, 65536))
    assert (r2.local.attention, r2.remote.attention) == (((0, 81920),), ((4 * 40960, 81920),))


def test_jamba_p_tp4_d_tp1_uses_split_lists():
    # vLLM 0.33's 80-token blocks: a KV head's 80 tokens of K and V are 40960 bytes of a kernel block.
    engine = EngineFlags(release=V0_33)
    plan = build_plan(load_model("jamba"), 4, 1, PlanOptions(prefill=engine, decode=engine))
    reads = plan.descriptors.reads
    assert [(r.p_rank, r.local_list) for r in reads] == [(i, f"split:{i}") for i in range(4)]
    for i, read in enumerate(reads):
        # Slice i of D's x and ssm; P rank i's whole state; its 2 KV heads land at heads 2i, 2i+1.
        assert read.local.regions == ((i * 12288, 12288), (49152 + i * 65536, 65536))
        assert read.remote.regions == ((0, 12288), (12288, 65536))
        assert (read.local.attention, read.remote.attention) == (((i * 81920, 81920),), ((0, 81920),))
        assert read.to_dict()["ssm_regions_per_layer"] == 2


def test_non_attention_source_contributes_ssm_ids_only():
    # Qwen3.5-0.8B has 2 KV heads: at P TP4 ranks 0,1 hold head 0 and ranks 2,3 head 1, so D TP1
    # takes attention from P0 and P2 only.
    plan = build_plan(load_model("qwen3.5-0.8b"), 4, 1, PlanOptions(request_blocks=2))
    dmap = plan.descriptors
    assert dmap.groups == ("ssm", "ssm", "ssm", "attention")
    assert (dmap.decode.tensors, dmap.decode.ssm_tensors, dmap.decode.attention_streams) == (6, 6, 6)
    per_group = 2
    ssm_ids = 3 * 6 * 4 * per_group                      # groups * tensors * k * blocks
    attn_ids = 6 * 1 * per_group                         # streams * kernel blocks (token chunks here)
    # P TP4 (320-token blocks) and D TP1 (576): the exact plan moves tokens in chunks of gcd = 64,
    # per head: D's 2 logical blocks hold 1152 tokens = 18 chunks.
    attn_ids = 6 * 18
    assert [(r.p_rank, r.attention, len(r.local_ids)) for r in dmap.reads] == [
        (0, True, ssm_ids + attn_ids), (1, False, ssm_ids), (2, True, ssm_ids + attn_ids), (3, False, ssm_ids)]
    assert all(len(r.local_ids) == len(r.remote_ids) for r in dmap.reads)


def test_model_without_attention_has_one_group_per_engine_tensor_per_layer():
    plan = build_plan(load_model("mamba-130m"), 1, 2, PlanOptions(request_blocks=1))
    engine = plan.descriptors.decode
    assert plan.descriptors.groups == ("ssm",)
    assert (engine.tensors, engine.ssm_tensors, engine.attention_descs) == (24, 24, 24 * 100_000)
    assert all(len(r.local_ids) == 24 * 2 for r in plan.descriptors.reads)


def test_map_to_dict_filters_d_rank():
    plan = build_plan(load_model("jamba"), 1, 4)
    d = plan.descriptors.to_dict(d_rank=2)
    assert [r["d_rank"] for r in d["reads"]] == [2]
    assert len(d["request"]["prefill_blocks"]) == 8


def test_random_request_is_distinct_and_seeded():
    eng = list_shape(vllm_grouping(("ssm",) * 3 + ("attention",)), 400, 4, 1, 2)
    a = random_request([5, 5], [5, 5], eng, eng, seed=1)
    assert a.to_dict() == random_request([5, 5], [5, 5], eng, eng, seed=1).to_dict()
    for side in (a.prefill_blocks, a.decode_blocks):
        flat = np.concatenate(side)
        assert len(set(flat.tolist())) == 10 and flat.min() >= 0 and flat.max() < 100
    b = random_request([3, 7], [5, 5], eng, eng, seed=1)          # attention groups may differ in count
    assert [len(x) for x in b.prefill_blocks] == [3, 7] and [len(x) for x in b.decode_blocks] == [5, 5]
    with pytest.raises(UserError, match=r"a request of 202 logical blocks \(101, 101 per KV-cache group\) does "
                                        r"not fit an engine of 100 logical blocks"):
        random_request([101, 101], [1, 1], eng, eng, seed=0)


def test_parse_blocks():
    eng = list_shape(vllm_grouping(("ssm", "attention")), 40, 4, 1, 2)   # 10 logical blocks
    assert [b.tolist() for b in parse_blocks("3,5;1", 2, eng, "prefill")] == [[3, 5], [1]]
    # A request holds each block once: one list for two groups would share its pages.
    with pytest.raises(UserError, match="block 4 is in groups 0 and 1"):
        parse_blocks("4", 2, eng, "prefill")
    with pytest.raises(UserError, match="block 3 is twice in group 0"):
        parse_blocks("3,3;1", 2, eng, "prefill")
    with pytest.raises(UserError, match="'3,x' is not a list of integers"):
        parse_blocks("3,x", 2, eng, "prefill")
    with pytest.raises(UserError, match="--decode-blocks gives 3 groups, the model has 2 KV-cache groups"):
        parse_blocks("1;2;3", 2, eng, "decode")
    with pytest.raises(UserError, match="block 10 is outside the prefill engine's 10 logical blocks"):
        parse_blocks("10", 2, eng, "prefill")


def test_engine_errors():
    grouping = vllm_grouping(("ssm",))
    with pytest.raises(UserError, match="attention streams per KV-cache tensor must be 1"):
        list_shape(grouping, 100, 1, 3, 2)
    with pytest.raises(UserError, match="3 kernel blocks hold no whole logical block of 4"):
        list_shape(grouping, 3, 4, 1, 2)
    with pytest.raises(UserError, match="must be >= 1"):
        list_shape(grouping, 0, 1, 1, 2)


def test_request_blocks_must_be_positive():
    with pytest.raises(UserError, match="--request-blocks must be >= 1"):
        build_plan(load_model("jamba"), 1, 2, PlanOptions(request_blocks=0))


def test_attention_groups_cover_the_same_tokens_on_both_sides():
    # Qwen3.5-0.8B, prefix caching off, vLLM 0.33: P TP4 blocks of 272 tokens, D TP1 of 544. Two D
    # blocks hold 1088 tokens, which take four P blocks; SSM groups pair block for block.
    flags = EngineFlags(release=V0_33, prefix_caching=False, num_blocks=4096)
    plan = build_plan(load_model("qwen3.5-0.8b"), 4, 1, PlanOptions(prefill=flags, decode=flags, request_blocks=2))
    request = plan.descriptors.request
    assert [len(b) for b in request.decode_blocks] == [2, 2, 2, 2]
    assert [len(b) for b in request.prefill_blocks] == [2, 2, 2, 4]
    with pytest.raises(UserError, match="2 D blocks of 544 tokens need 4 P blocks of 272 tokens, got 2"):
        build_plan(load_model("qwen3.5-0.8b"), 4, 1,
                   PlanOptions(prefill=flags, decode=flags, prefill_blocks="1,2;5,6;7,8;9,10",
                               decode_blocks="3,4;11,12;13,14;15,16"))
