"""reads: exact and vLLM 0.33 reads, coalescing and misreads (docs/reference.md §3).

Hand-worked plans: every number below is derived in the comments from the model's dimensions,
then asserted; exact and vLLM semantics must agree on all of them (no replicated groups).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.startup import rank_layouts
from mambaxfer_cli.planning.layout import Shard
from mambaxfer_cli.planning.model import ModelSpec, Variant
from mambaxfer_cli.readers.model_config import spec_from_config
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.engines.vllm.plan import PlanOptions, build_plan
from mambaxfer_cli.engines.vllm.reads import EXACT, VLLM, plan_reads, vllm_reads
from mambaxfer_cli.planning.reads import (
    Read, Segment, Holding, assign_units, coalesce, exact_reads, misreads, tp_ratio,
)

HF = Path(__file__).parent / "fixtures" / "hf-configs"


def load(fixture: str):
    return spec_from_config(json.loads((HF / fixture).read_text()), name=fixture, source=fixture)


def both(model, p_tp, d_tp):
    return rank_layouts(model, p_tp), rank_layouts(model, d_tp)


def segs(read: Read) -> list[tuple]:
    return [(s.region, s.remote_offset, s.local_offset, s.size) for s in read.segments]


def mamba1(intermediate: int, d_state: int = 4, conv_kernel: int = 4, dtype: str = "bfloat16") -> ModelSpec:
    return ModelSpec(name="m1", source="", variant=Variant("mamba1"),
                     params={"intermediate_size": intermediate, "d_state": d_state}, layers=("ssm",),
                     conv_kernel=conv_kernel, num_spec=0, conv_dtype=dtype, ssm_dtype=dtype)


def assert_both_semantics(model, p_tp, d_tp, expected: dict[tuple[int, int], list[tuple]]):
    prefill, decode = both(model, p_tp, d_tp)
    for reads in (exact_reads(prefill, decode), vllm_reads(prefill, decode)):
        assert {(r.d_rank, r.p_rank): segs(r) for r in reads} == expected
        assert [(r.d_rank, r.p_rank) for r in reads] == list(expected)      # D-rank, then P-rank order
        assert misreads(reads, prefill, decode) == []


@pytest.mark.parametrize("p, d, expected", [(1, 4, 4), (4, 1, -4), (2, 2, 1), (6, 2, -3), (2, 3, None),
                                            (4, 6, None), (3, 2, None)])
def test_tp_ratio(p, d, expected):
    assert tp_ratio(p, d) == expected


# docs/reference.md §4: vLLM's Mamba1 conv offsets for proj (16,), bf16, 3 rows.
# pb = 16 channels * 3 rows * 2 bytes = 96: local [(0, 96)].
def test_vllm_mamba1_remote_offsets_tp_ratio_2():
    # tp_ratio 2: P TP1, D TP2, so I = 32 gives D ranks 16 channels. D rank 1 has lro = 1:
    # x at 0 * 2 + 1 * 96 = 96, size 96.
    prefill, decode = both(mamba1(32), 1, 2)
    assert (decode[1].region("x").offset, decode[1].region("x").size) == (0, 96)
    read, = [r for r in vllm_reads(prefill, decode) if r.d_rank == 1]
    x = read.segments[0]
    assert (x.region, x.remote_offset, x.size, x.local_offset) == ("x", 96, 96, 0)


def test_vllm_mamba1_remote_offsets_tp_ratio_minus_2():
    # tp_ratio -2: P TP2, D TP1, I = 16: each P rank's x is read at 0, size 96 / 2 = 48, landing in
    # slice i of D's x (local offset i * 48).
    prefill, decode = both(mamba1(16), 2, 1)
    assert (decode[0].region("x").offset, decode[0].region("x").size) == (0, 96)
    xs = [(r.p_rank, r.segments[0].remote_offset, r.segments[0].size, r.segments[0].local_offset)
          for r in vllm_reads(prefill, decode)]
    assert xs == [(0, 0, 48, 0), (1, 0, 48, 48)]


def test_jamba_p_tp1_d_tp4_by_hand():
    # Jamba: I = 2 * 4096 = 8192, d_state 16, 3 conv rows, bf16.
    # P TP1: x 8192 ch * 6 B = 49152 at 0; ssm 8192 ch * 32 B = 262144 at 49152.
    # D TP4: x 2048 ch = 12288 at 0; ssm 2048 ch * 32 = 65536 at 12288.
    # D rank r reads P0 (tp_ratio 4, lro r): x at r * 12288; ssm at 49152 + r * 65536.
    assert_both_semantics(load("ai21labs__Jamba-v0.1.json"), 1, 4, {
        (0, 0): [("x", 0, 0, 12288), ("ssm", 49152, 12288, 65536)],
        (1, 0): [("x", 12288, 0, 12288), ("ssm", 114688, 12288, 65536)],
        (2, 0): [("x", 24576, 0, 12288), ("ssm", 180224, 12288, 65536)],
        (3, 0): [("x", 36864, 0, 12288), ("ssm", 245760, 12288, 65536)],
    })


def test_jamba_p_tp4_d_tp1_by_hand():
    # P TP4: x 12288 at 0, ssm 65536 at 12288 on every P rank. D TP1: x 49152 at 0, ssm at 49152.
    # D rank 0 reads each P rank i whole: x into i * 12288, ssm into 49152 + i * 65536.
    assert_both_semantics(load("ai21labs__Jamba-v0.1.json"), 4, 1, {
        (0, 0): [("x", 0, 0, 12288), ("ssm", 12288, 49152, 65536)],
        (0, 1): [("x", 0, 12288, 12288), ("ssm", 12288, 114688, 65536)],
        (0, 2): [("x", 0, 24576, 12288), ("ssm", 12288, 180224, 65536)],
        (0, 3): [("x", 0, 36864, 12288), ("ssm", 12288, 245760, 65536)],
    })


def test_nemotron_h_8b_p_tp1_d_tp2_by_hand():
    # Nemotron-H-8B: I = 128 heads * 64 = 8192, 8 groups * 128 states = 1024 B/C channels,
    # 3 conv rows bf16 (6 B per channel), temporal float32: one head 64 * 128 * 4 = 32768 B.
    # P TP1: x 49152 at 0; B 6144 at 49152; C 6144 at 55296; ssm 128 heads = 4194304 at 61440.
    # D TP2: x 24576 at 0; B 3072 at 24576; C 3072 at 27648; ssm 64 heads = 2097152 at 30720.
    # D rank r (lro r): x at r * 24576; B at 49152 + r * 3072; C at 55296 + r * 3072;
    # ssm at 61440 + r * 2097152.
    assert_both_semantics(load("nvidia__Nemotron-H-8B-Base-8K.partial.json"), 1, 2, {
        (0, 0): [("x", 0, 0, 24576), ("B", 49152, 24576, 3072), ("C", 55296, 27648, 3072),
                 ("ssm", 61440, 30720, 2097152)],
        (1, 0): [("x", 24576, 0, 24576), ("B", 52224, 24576, 3072), ("C", 58368, 27648, 3072),
                 ("ssm", 2158592, 30720, 2097152)],
    })


def test_qwen35_08b_p_tp2_d_tp1_by_hand():
    # Qwen3.5-0.8B: Q, K, V 16 heads * 128 = 2048 channels each, 3 conv rows bf16 (6 B);
    # temporal float32: one v-head 128 * 128 * 4 = 65536 B.
    # P TP2: Q 6144 at 0; K 6144 at 6144; V 6144 at 12288; ssm 8 heads = 524288 at 18432.
    # D TP1: Q 12288 at 0; K at 12288; V at 24576; ssm 1048576 at 36864.
    # P rank i lands in slice i of each D region.
    assert_both_semantics(load("Qwen__Qwen3.5-0.8B.partial.json"), 2, 1, {
        (0, 0): [("Q", 0, 0, 6144), ("K", 6144, 12288, 6144), ("V", 12288, 24576, 6144),
                 ("ssm", 18432, 36864, 524288)],
        (0, 1): [("Q", 0, 6144, 6144), ("K", 6144, 18432, 6144), ("V", 12288, 30720, 6144),
                 ("ssm", 18432, 561152, 524288)],
    })


def test_build_plan_carries_the_same_reads():
    plan = build_plan(load_model("jamba"), 1, 4)
    assert plan.tp_ratio == 4 and plan.semantics == EXACT and plan.warnings == ()
    assert [segs(r) for r in plan.reads][3] == [("x", 36864, 0, 12288), ("ssm", 245760, 12288, 65536)]


def test_non_multiple_pairing_by_hand():
    # Mamba1, I = 6, d_state 1, conv_kernel 2 (1 row), float32: 4 B per unit in both regions.
    # P TP2: x [0,3) | [3,6), ssm at 12.  D TP3: x [0,2) | [2,4) | [4,6), ssm at 8.
    # D rank 1 needs units 2 and 3: unit 2 from P0 (x at 8, ssm at 12 + 8), unit 3 from P1 (x at 0,
    # ssm at 12).
    prefill, decode = both(mamba1(6, d_state=1, conv_kernel=2, dtype="float32"), 2, 3)
    reads = exact_reads(prefill, decode)
    assert {(r.d_rank, r.p_rank): segs(r) for r in reads if r.d_rank == 1} == {
        (1, 0): [("x", 8, 0, 4), ("ssm", 20, 8, 4)],
        (1, 1): [("x", 0, 4, 4), ("ssm", 12, 12, 4)],
    }
    assert tp_ratio(2, 3) is None
    with pytest.raises(UserError, match=r"vLLM needs one TP size to divide the other \(P TP 2, D TP 3\)"):
        vllm_reads(prefill, decode)


GRANITE = "ibm-granite__granite-4.0-h-tiny.partial.json"


def test_granite_vllm_p_tp1_d_tp2_misreads_match_the_spec():
    # docs/reference.md §3: in 1P2D, D rank 0 reads the first temporal bytes as C, and D rank 1 reads
    # C as B and temporal bytes as C.
    prefill, decode = both(load(GRANITE), 1, 2)
    bad = [(m.d_rank, m.wanted, m.got) for m in misreads(vllm_reads(prefill, decode), prefill, decode)]
    assert bad == [(0, "C[0:128]", "ssm[0:1]"), (1, "B[0:128]", "C[0:128]"), (1, "C[0:128]", "ssm[0:1]")]


def test_granite_vllm_p_tp2_d_tp1_misreads():
    # D TP1's sub-projections are (3072, 128, 128) channels, 6 B each; vLLM reads region i of each
    # P rank at sum(pb_j / 2): B at 1536 ch (right: P's B starts there) but only 64 of its 128
    # channels, C at 1600 ch: the second half of P's B, since P holds the group whole.
    prefill, decode = both(load(GRANITE), 2, 1)
    bad = [(m.p_rank, m.wanted, m.got) for m in misreads(vllm_reads(prefill, decode), prefill, decode)]
    assert bad == [(0, "C[0:64]", "B[64:128]"), (1, "B[64:128]", "B[0:64]"), (1, "C[64:128]", "B[64:128]")]


def test_granite_exact_reads_take_the_whole_group_from_one_rank():
    prefill, decode = both(load(GRANITE), 2, 4)
    reads = exact_reads(prefill, decode)
    # Each D rank reads x, B, C and ssm from the one P rank that holds its x.
    assert [(r.d_rank, r.p_rank, [s.region for s in r.segments]) for r in reads] == [
        (d, d // 2, ["x", "B", "C", "ssm"]) for d in range(4)]
    assert misreads(reads, prefill, decode) == []
    # B of P rank 1 (offset 9216 = 1536 ch * 6) into B of D rank 3, whole: 128 ch * 6 = 768 B.
    assert reads[3].segments[1] == Segment("B", 9216, 4608, 768)


def test_granite_exact_p_tp4_d_tp2_prefers_the_lowest_x_source():
    prefill, decode = both(load(GRANITE), 4, 2)
    reads = exact_reads(prefill, decode)
    assert [(r.d_rank, r.p_rank, [s.region for s in r.segments]) for r in reads] == [
        (0, 0, ["x", "B", "C", "ssm"]), (0, 1, ["x", "ssm"]),
        (1, 2, ["x", "B", "C", "ssm"]), (1, 3, ["x", "ssm"])]
    assert misreads(reads, prefill, decode) == []


def test_vllm_plan_warns_on_replicated_groups():
    plan = build_plan(load_model("granite-4.0-h-tiny"), 1, 2, PlanOptions(semantics=VLLM))
    assert [w.code for w in plan.warnings] == ["vllm-replicated-groups"]
    assert "D0 C[0:128] <- P0 ssm[0:1]" in plan.warnings[0].message
    exact = build_plan(load_model("granite-4.0-h-tiny"), 1, 2)
    assert [w.code for w in exact.warnings] == ["vllm-differs"]


def test_assign_units_prefers_then_lowest():
    holders = [Holding(0, Shard(0, 6), 0), Holding(1, Shard(4, 10), 0)]
    assert assign_units(Shard(0, 10), holders, preferred=set()) == [(holders[0], Shard(0, 6)),
                                                                    (holders[1], Shard(6, 10))]
    assert assign_units(Shard(0, 10), holders, preferred={1}) == [(holders[0], Shard(0, 4)),
                                                                  (holders[1], Shard(4, 10))]


def test_coalesce_homogeneous_pairing_reads_one_run():
    prefill, decode = both(load_model("jamba"), 2, 2)
    merged = coalesce(exact_reads(prefill, decode))
    # x (24576 B) and ssm (131072 B) sit back to back on both sides.
    assert [segs(r) for r in merged] == [[("x+ssm", 0, 0, 155648)]] * 2


def test_coalesce_keeps_non_adjacent_segments():
    prefill, decode = both(load_model("jamba"), 1, 4)
    reads = exact_reads(prefill, decode)
    assert coalesce(reads) == reads


def test_vllm_plan_of_a_refused_pairing_is_an_error():
    model = mamba1(6, d_state=1, conv_kernel=2)
    with pytest.raises(UserError, match=r"\(P TP 3, D TP 2\); use --semantics exact to plan this pairing"):
        build_plan(model, 3, 2, PlanOptions(semantics=VLLM))
    assert [w.code for w in build_plan(model, 3, 2).warnings] == ["vllm-refuses"]


def test_unknown_semantics():
    with pytest.raises(UserError, match="unknown semantics 'fast'; choose one of: exact, vllm"):
        plan_reads(*both(load_model("jamba"), 1, 1), "fast")


def test_misreads_catch_a_shifted_segment():
    prefill, decode = both(load_model("jamba"), 1, 2)
    good = exact_reads(prefill, decode)
    x = good[0].segments[0]
    shifted = (Read(0, 0, (Segment("x", x.remote_offset + 6, x.local_offset, x.size),)),)
    bad = misreads(shifted, prefill, decode)
    assert bad and bad[0].wanted == "x[0:4096]" and bad[0].got == "x[1:4097]"
