"""SGLang 0.5.23's rules (mambaxfer_cli/engines/sglang): facts pinned from SGLang's code, worked
by hand, and checked against a byte-level simulation that labels every byte with what it holds."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mambaxfer_cli.engines.sglang.plan import plan
from mambaxfer_cli.engines.sglang.shapes import sglang_model, tp_sizes
from mambaxfer_cli.engines.sglang.verdict import verdict
from mambaxfer_cli.engines.sglang.bootstrap import Server, refusals
from mambaxfer_cli.engines.sglang.entries import CONV, TEMPORAL, entry_for, side_entries, transfer_entries
from mambaxfer_cli.engines.sglang.heads import head_slice
from mambaxfer_cli.engines.sglang.ranks import RankMapping, rank_findings, rank_mapping, writers
from mambaxfer_cli.engines.sglang.release import MOONCAKE, NIXL, SGLANG_0_5_23
from mambaxfer_cli.engines.sglang.shapes import (
    kda_state_shape, mamba1_state_shape, mamba2_state_shape, state_dtypes, state_shape, tp_refusal,
)
from mambaxfer_cli.engines.sglang.slices import Block, byte_blocks, replicated_writer, slice_blocks
from mambaxfer_cli.engines.sglang.writes import (
    StateWrite, Side, check_side, compare, exact_writes, sglang_writes,
)
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.planning.layout import RankLayout
from mambaxfer_cli.planning.model import ModelSpec, Variant
from mambaxfer_cli.readers.model_source import load_model, preset_names
from mambaxfer_cli.engines.sglang.served import startup

FAST = settings(max_examples=60, deadline=None)


def model(name: str) -> ModelSpec:
    return load_model(name, startup=startup(SGLANG_0_5_23.version))    # read as SGLang starts it


SERVED = [n for n in preset_names() if SGLANG_0_5_23.families[model(n).family].served]


# --- shapes and dtypes (configs/mamba_utils.py) -----------------------------------------------------

def test_qwen3_next_shapes_as_sglang_gives_them():
    m = model("qwen3-next-80b")
    one, two = state_shape(m, 1), state_shape(m, 2)
    assert (one.conv, one.temporal) == ((8192, 3), (32, 128, 128))
    assert (two.conv, two.temporal) == ((4096, 3), (16, 128, 128))
    assert two.conv_shard_groups == (2048, 2048, 4096)        # [key_dim, key_dim, value_dim]


def test_mamba2_conv_is_x_b_c_with_groups_padded_to_tp():
    nemotron = state_shape(model("nemotron-h-8b"), 2)
    assert nemotron.conv == ((8192 + 2 * 8 * 128) // 2, 3) and nemotron.temporal == (64, 64, 128)
    assert nemotron.conv_shard_groups is None                  # no Mamba2 config sets them
    granite = model("granite-4.0-h-tiny")                      # one group, grown to TP
    assert [state_shape(granite, tp).conv[0] for tp in (1, 2, 4)] == [3072 + 256, 1536 + 256, 768 + 256]
    assert mamba2_state_shape(tp=4, intermediate_size=64, n_groups=2, num_heads=8, head_dim=8, state_size=4,
                              conv_kernel=4).conv_dim_full == 64 + 2 * 4 * 4


def test_mamba1_is_a_full_rank_mamba2_layout_and_kimi_transposes_its_conv():
    assert mamba1_state_shape(tp=2, intermediate_size=1536, state_size=16, conv_kernel=4).temporal == (768, 1, 16)
    kimi = kda_state_shape(tp=2, num_heads=32, head_dim=128)
    assert (kimi.conv, kimi.conv_dim, kimi.conv_outer) == ((3, 6144), 6144, 3)
    assert kimi.conv_shard_groups == (4096, 4096, 4096) and kimi.temporal == (16, 128, 128)


def test_state_dtypes_follow_sglangs_priority():
    assert state_dtypes() == state_dtypes(config_ssm_dtype=None)
    assert (state_dtypes().conv, state_dtypes().temporal) == ("bfloat16", "float32")
    assert state_dtypes(config_ssm_dtype="float16").temporal == "float16"
    assert state_dtypes(config_ssm_dtype="float16", reads_config=False).temporal == "float32"
    assert state_dtypes(config_ssm_dtype="float8").temporal == "float32"          # warned, then default
    env = {"SGLANG_MAMBA_SSM_DTYPE": "bfloat16", "SGLANG_MAMBA_CONV_DTYPE": "float32"}
    got = state_dtypes(config_ssm_dtype="float16", env=env)
    assert (got.conv, got.temporal) == ("float32", "bfloat16")
    assert got.origin == ("env SGLANG_MAMBA_CONV_DTYPE", "env SGLANG_MAMBA_SSM_DTYPE")
    assert state_dtypes(config_ssm_dtype="float16", env={"SGLANG_MAMBA_SSM_DTYPE": "x"}).temporal == "float16"
    assert state_dtypes(env={"SGLANG_MAMBA_CONV_DTYPE": "x"}).conv == "bfloat16"


def test_sglang_keeps_k_minus_1_conv_rows_in_its_own_dtypes():
    m = sglang_model(model("mamba-130m"))                 # a float32 model: SGLang's conv is still bf16
    assert (m.conv_dtype, m.ssm_dtype, m.conv_rows) == ("bfloat16", "float32", 3)
    qwen35 = sglang_model(model("qwen3.5-0.8b"), {"SGLANG_MAMBA_SSM_DTYPE": "float16"})
    assert qwen35.ssm_dtype == "float16" and qwen35.origin["ssm_dtype"] == "env SGLANG_MAMBA_SSM_DTYPE"
    with pytest.raises(UserError, match="no Jamba model file"):
        sglang_model(model("jamba"))


def test_tp_sizes_and_sglangs_asserts():
    assert tp_sizes(model("nemotron-h-8b")) == (1, 2, 4, 8)
    assert tp_sizes(model("mamba-130m")) == (1, 2, 3, 4, 6, 8)
    assert tp_refusal(model("nemotron-h-8b"), 3) == "Tensor parallel world size must divide num heads."
    with pytest.raises(UserError, match="cannot serve it at TP 3: Tensor parallel world size must divide"):
        verdict(model("nemotron-h-8b"), 3, 1)


# --- the slot's entries (MambaPool) -----------------------------------------------------------------

def test_entries_run_conv_by_layer_then_temporal():
    # The numbers SGLang's own MambaPool registers for this shape (the conformance probe builds it).
    shape = mamba2_state_shape(tp=2, intermediate_size=2048, n_groups=16, num_heads=16, head_dim=128,
                               state_size=128, conv_kernel=4, conv_shard_groups=(2048, 2048, 2048))
    entries = transfer_entries(shape, "bfloat16", "float32", (0, 1, 2))
    assert [(e.field, e.layer_id, e.item_len, e.dim) for e in entries] == (
        [(CONV, i, 18432, 3072) for i in range(3)] + [(TEMPORAL, i, 524288, 8) for i in range(3)])
    kimi = entry_for(CONV, kda_state_shape(tp=2, num_heads=32, head_dim=128), "bfloat16", "float32", 1)
    assert (kimi.item_len, kimi.dim, kimi.outer_count) == (36864, 6144, 3)
    short_conv = mamba2_state_shape(tp=1, intermediate_size=8, n_groups=1, num_heads=1, head_dim=8,
                                    state_size=0, conv_kernel=3)
    assert [e.field for e in transfer_entries(short_conv, "bfloat16", "float32", (0,))] == [CONV]


# --- heterogeneous-TP blocks (disaggregation/utils.py) ----------------------------------------------

def test_gdn_blocks_one_per_sub_block():
    qwen = sglang_model(model("qwen3-next-80b"))
    src, dst = Side(qwen, 1).entry(CONV), Side(qwen, 2).entry(CONV)
    got = byte_blocks(src, dst, src_tp=1, dst_tp=2, dst_rank=1, src_rank=0)
    assert [b.as_tuple() for b in got] == [(6144, 0, 6144), (18432, 6144, 6144), (36864, 12288, 12288)]
    temporal = byte_blocks(Side(qwen, 1).entry(TEMPORAL), Side(qwen, 2).entry(TEMPORAL), src_tp=1, dst_tp=2,
                           dst_rank=1, src_rank=0)
    assert [b.as_tuple() for b in temporal] == [(1048576, 0, 1048576)]


def test_one_contiguous_block_without_shard_groups():
    # Scatter: the decode rank's share at (rank · dst_dim) mod src_dim; aggregation: the writer's
    # whole shard at writer · src_dim.
    assert slice_blocks(src_dim=10, dst_dim=5, src_tp=1, dst_tp=2, dst_rank=1, src_rank=0) == (Block(5, 0, 5),)
    assert slice_blocks(src_dim=5, dst_dim=10, src_tp=2, dst_tp=1, dst_rank=0, src_rank=1) == (Block(0, 5, 5),)
    assert slice_blocks(src_dim=5, dst_dim=10, src_tp=4, dst_tp=2, dst_rank=1, src_rank=2) == (Block(0, 0, 5),)
    # Shard groups that do not add up to the unsharded axis are ignored, as SGLang does.
    assert len(slice_blocks(src_dim=10, dst_dim=5, src_tp=1, dst_tp=2, dst_rank=0, src_rank=0,
                            conv_shard_groups=(3, 3, 3))) == 1


def test_kimi_blocks_repeat_for_every_conv_row():
    src, dst = (entry_for(CONV, kda_state_shape(tp=t, num_heads=4, head_dim=2), "bfloat16", "float32")
                for t in (1, 2))
    got = byte_blocks(src, dst, src_tp=1, dst_tp=2, dst_rank=0, src_rank=0)
    assert len(got) == 3 * 3                                     # K-1 rows, three sub-blocks each
    row = src.dim * 2                                            # one conv row of the source, in bytes
    assert [b.src // row for b in got] == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_replicated_items_elect_writers_or_refuse():
    assert [replicated_writer(4, 2, r) for r in range(4)] == [True, False, True, False]
    assert all(replicated_writer(2, 4, r) for r in range(2))
    with pytest.raises(UserError, match="One attention TP size must divide the other for replicated-state "
                                        "transfer: src=3, dst=2"):
        replicated_writer(3, 2, 0)
    item = replace(Side(sglang_model(model("qwen3-next-80b")), 1).entry(TEMPORAL), dim=0)
    assert byte_blocks(item, item, src_tp=4, dst_tp=2, dst_rank=0, src_rank=1) == ()
    assert byte_blocks(item, item, src_tp=4, dst_tp=2, dst_rank=0, src_rank=2) == (Block(0, 0, item.item_len),)


# --- ranks and heads (common/conn.py, common/staging_buffer.py) -------------------------------------

def test_rank_mapping():
    assert rank_mapping(2, 2, 1).target_ranks == (1,)
    assert rank_mapping(2, 4, 3) == RankMapping(3, (1,), 2, 1)      # two decode ranks per prefill rank
    assert rank_mapping(4, 2, 1) == RankMapping(1, (2, 3), 1, 2)    # two prefill answers per decode rank


def test_non_multiple_ratios_skip_or_invent_prefill_ranks():
    assert [writers(3, 2, d) for d in range(2)] == [(0,), (1,)]
    assert rank_findings(3, 2).unread == (2,)
    assert rank_findings(2, 3).missing == ((2, 2),) and writers(2, 3, 2) == ()
    assert not rank_findings(2, 4) and not rank_findings(8, 2)


def test_head_slices_with_gqa_replication():
    # Two KV heads: P1 -> D4 reads source heads 0, 0, 1, 1; P4 -> D1 writes destination heads 0, 0, 1, 1.
    assert [head_slice(src_tp=1, dst_tp=4, src_rank=0, dst_rank=d, kv_heads=2).src_start for d in range(4)] == \
        [0, 0, 1, 1]
    assert [head_slice(src_tp=4, dst_tp=1, src_rank=p, dst_rank=0, kv_heads=2).dst_start for p in range(4)] == \
        [0, 0, 1, 1]
    assert head_slice(src_tp=2, dst_tp=4, src_rank=1, dst_rank=3, kv_heads=8).as_tuple() == (2, 2, 0, 2)


# --- refusals, as SGLang words them -----------------------------------------------------------------

def test_bootstrap_refusals_quote_sglang():
    said = refusals(Server(2, page_size=16), Server(2, page_size=1))
    assert [str(r) for r in said] == [
        "Page size mismatch: prefill server has page_size=16, but decode server has page_size=1. "
        "Both servers must use the same --page-size value."]
    said = refusals(Server(1, kv_cache_dtype="fp8_e4m3"), Server(1))
    assert str(said[0]).startswith("KV cache dtype mismatch: prefill server has kv_cache_dtype=fp8_e4m3, but")
    assert str(refusals(Server(1, pp=2), Server(1, pp=4))[0]) == \
        "Decode pp size (4) should be equal to prefill pp size (2) or 1"
    assert not refusals(Server(1, pp=2), Server(1, pp=1))


def test_nixl_and_mooncake_differ_on_replicated_state_and_unified_memory():
    p, d = Server(4, replicated_state=True), Server(2, replicated_state=True)
    assert str(refusals(p, d, NIXL)[0]) == ("Replicated Mamba PD state transfer currently requires matching "
                                           "prefill/decode attention TP sizes")
    assert refusals(p, d, MOONCAKE) == ()
    assert "must divide the other" in str(refusals(Server(3, replicated_state=True), Server(2), MOONCAKE)[0])
    unified = refusals(Server(2, unified_memory=True), Server(1), MOONCAKE)
    assert str(unified[0]).startswith("--enable-unified-memory does not support different prefill / decode")
    assert refusals(Server(2, unified_memory=True), Server(1), NIXL) == ()


def test_unequal_slots_at_equal_tp():
    # A prefill server that keeps the temporal state in bf16: Mooncake refuses, NIXL copies
    # prefill's (shorter) item into decode's.
    m, env = model("qwen3.5-0.8b"), {"SGLANG_MAMBA_SSM_DTYPE": "bfloat16"}
    refused = verdict(m, 2, 2, backend=MOONCAKE, p_env=env)
    assert refused.refusal == ("Prefill/Decode Mamba slot size mismatch (src=262144, dst=524288). Configure "
                               "matching persistent state layouts on both peers.")
    silent = verdict(m, 2, 2, backend=NIXL, p_env=env)
    assert silent.refusal is None and {(o.wrong, o.missing) for o in silent.outcomes if o.field == TEMPORAL} == \
        {(262144, 262144)}
    assert plan(m, 2, 2, p_env=env).exact == ()


# --- the verdicts -----------------------------------------------------------------------------------

def test_mamba2_finding_nemotron_p1_to_d2_by_hand():
    # D0 wants [x 0:4096 | B 0:512 | C 0:512] and gets channels 0:5120 (x 0:5120): 1024 channels
    # wrong. D1 wants [x 4096:8192 | B 512:1024 | C 512:1024] and gets 5120:10240 = [x 5120:8192 |
    # B | C]: only its last 512 (C 512:1024) land right, 4608 channels wrong. 6 bytes a channel
    # (3 rows of bf16), 24 Mamba layers.
    v = verdict(model("nemotron-h-8b"), 1, 2)
    conv = {o.d_rank: o.wrong for o in v.outcomes if o.field == CONV}
    assert conv == {0: 1024 * 6, 1: 4608 * 6}
    assert v.bad_bytes(TEMPORAL) == 0 and v.bad_bytes() == (1024 + 4608) * 6 * 24
    assert v.sentence() == ("SGLang 0.5.23 corrupts the conv state of nemotron-h-8b at P TP 1 \u2192 D TP 2: "
                            "811,008 bytes wrong")


@pytest.mark.parametrize("name", ["nemotron-h-8b", "granite-4.0-h-tiny", "mamba-codestral-7b"])
@pytest.mark.parametrize("p_tp, d_tp", [(1, 2), (2, 1), (4, 2), (2, 4), (8, 1), (1, 8)])
def test_mamba2_conv_is_corrupted_across_tp_sizes(name, p_tp, d_tp):
    m = model(name)
    if max(p_tp, d_tp) not in tp_sizes(m):      # granite-4.0-h-tiny's 12 attention heads: no TP 8
        with pytest.raises(UserError, match="attention heads"):
            verdict(m, p_tp, d_tp)
        return
    v = verdict(m, p_tp, d_tp)
    assert v.bad_bytes(CONV) > 0 and v.bad_bytes(TEMPORAL) == 0
    assert "corrupts the conv state of" in v.sentence()


@pytest.mark.parametrize("name", SERVED)
def test_equal_tp_is_right_and_gdn_and_mamba1_are_right_across_dividing_tp_sizes(name):
    m = model(name)
    sizes = [t for t in tp_sizes(m) if t in (1, 2, 4, 8)]
    # A GDN family whose config passes no conv_shard_groups is sliced as Mamba2 is (test_sglang_new_families.py).
    for p_tp in sizes:
        assert verdict(m, p_tp, p_tp).right
        if m.variant != "mamba2" and SGLANG_0_5_23.families[m.family].conv_shard_groups:
            for d_tp in sizes:
                for backend in (NIXL, MOONCAKE):
                    v = verdict(m, p_tp, d_tp, backend=backend)
                    if backend == NIXL and p_tp != d_tp and side_entries(m):   # Qwen4Exp's replicated PLE state
                        assert v.refusal is not None and v.refusal.startswith("Replicated Mamba PD state")
                        continue
                    assert v.right, v.sentence()


def test_non_multiple_ratio_verdicts():
    v = verdict(model("mamba-130m"), 3, 2)
    assert v.findings == ("no decode rank reads prefill rank 2 (P TP 3)",)
    # Each decode rank gets one prefill rank's 512 channels for its 768: D0 the right 512 then
    # 256 missing, D1 channels 512:1024 where it wants 768:1536.
    assert {o.d_rank: (o.wrong, o.missing) for o in v.outcomes if o.field == CONV} == \
        {0: (0, 256 * 6), 1: (512 * 6, 256 * 6)}
    v = verdict(model("mamba-130m"), 2, 3)
    assert v.findings == ("decode rank 2 is pointed at prefill rank 2, which does not exist (P TP 2)",)
    assert [o.missing for o in v.outcomes if o.d_rank == 2] == [3072, 32768]
    # SGLang's bootstrap fails such requests before their state moves (no entry for prefill rank 2).
    assert not v.right and v.fails is not None and "HTTP 404" in v.fails
    assert v.lines() == ["SGLang 0.5.23 fails every request of mamba-130m at P TP 2 \u2192 D TP 3: "
                         + v.fails, v.findings[0],
                         "were the state moved, 1,720,320 bytes would be wrong"]
    assert "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT" in (verdict(model("mamba-130m"), 3, 2).fails or "")
    assert verdict(model("mamba-130m"), 2, 4).fails is None


def test_attention_heads_land_right():
    assert verdict(model("qwen3-next-80b"), 1, 8).heads_wrong == 0
    assert verdict(model("nemotron-h-8b"), 8, 2).heads_wrong == 0


def test_plan_descriptors_per_slot_and_layer():
    p = plan(model("nemotron-h-8b"), 1, 2)
    assert len(p.descriptors()) == len(p.writes) * 24
    first = p.descriptors(p_slot=3, d_slot=5)[0]
    entry = p.prefill_entries[first.src_entry]
    assert (first.src_offset, first.dst_offset) == (entry.item_len * 3, p.decode_entries[first.dst_entry].item_len * 5)
    doc = p.to_dict()
    assert doc["engine"] == "sglang" and doc["release"] == "0.5.23" and doc["verdict"]["bytes_wrong"] == 811008


# --- the comparison against an independent byte simulation ------------------------------------------

def _labels(layout: RankLayout, field: str, outer: int = 1) -> np.ndarray:
    """Every byte of one item labelled with what it holds: region, unit size and global byte
    (Kimi's conv: row by row, ``outer`` rows)."""
    def holder(r):   # a region with its own tensor (Zaya's prev_hs) is its own field
        return r.name if r.own else CONV if r.kind == "conv" else TEMPORAL
    base = next((r.offset for r in layout.regions if holder(r) == field), 0)
    out = []
    for index, r in enumerate(layout.regions):
        if holder(r) == field:
            assert r.offset - base == sum(len(a) for a in out)
            start = r.shard.start * r.unit_bytes
            out.append((index + 1) * 10**12 + r.unit_bytes * 10**8 + np.arange(start, start + r.size))
    if not out:
        return np.zeros(0, dtype=np.int64)
    labels = np.concatenate(out)
    if field == CONV and outer > 1:      # (channels, rows, bytes) -> (rows, channels, bytes)
        labels = labels.reshape(sum(layout.sub_projection_dims), outer, -1).swapaxes(0, 1).ravel()
    return labels


def simulate(writes, prefill: Side, decode: Side) -> int:
    """Apply the writes to labelled items; the decode bytes that differ from the exact labels
    (wrong or never written) plus the bytes written beyond an item."""
    bad = 0
    for field in decode.fields:
        sources = [_labels(layout, field, prefill.outer) for layout in prefill.layouts()]
        for layout in decode.layouts():
            want = _labels(layout, field, decode.outer)
            got = np.full(len(want), -1, dtype=np.int64)
            for w in writes:
                if w.field == field and w.d_rank == layout.rank:
                    src = np.full(w.length, -2, dtype=np.int64)
                    avail = sources[w.p_rank][w.src:w.src + w.length]
                    src[:len(avail)] = avail
                    room = max(0, min(w.length, len(got) - w.dst))
                    got[w.dst:w.dst + room] = src[:room]
                    bad += w.length - room
            bad += int(np.count_nonzero(got != want))
    return bad


@pytest.mark.parametrize("name", SERVED)
def test_compare_agrees_with_the_simulation_on_the_presets(name):
    m = sglang_model(model(name))
    for p_tp in tp_sizes(m, 4):
        for d_tp in tp_sizes(m, 4):
            p, d = check_side(m, p_tp), check_side(m, d_tp)
            writes = sglang_writes(p, d)
            assert sum(o.bad for o in compare(writes, p, d)) == simulate(writes, p, d)
            assert simulate(exact_writes(p, d), p, d) == 0


@st.composite
def sglang_pairings(draw):
    """A small model SGLang can serve at both TP sizes (non-multiples included)."""
    p_tp, d_tp = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    m = p_tp * d_tp
    variant = Variant(draw(st.sampled_from(["mamba1", "mamba2", "gdn"])))
    small = st.integers(1, 3)
    if variant == "mamba1":
        params = {"intermediate_size": m * draw(small), "d_state": draw(small)}
    elif variant == "mamba2":
        heads, head_dim = m * draw(st.integers(1, 2)), draw(small)
        params = {"intermediate_size": heads * head_dim, "d_state": draw(small),
                  "n_groups": draw(st.sampled_from([1, m])), "num_heads": heads, "head_dim": head_dim}
    else:
        k_heads = m * draw(st.integers(1, 2))
        params = {"num_k_heads": k_heads, "num_v_heads": k_heads * draw(st.integers(1, 2)),
                  "head_k_dim": draw(small), "head_v_dim": draw(small)}
    spec = ModelSpec(name="random", source="test", variant=variant, params=params, layers=("ssm",),
                     conv_kernel=draw(st.integers(2, 4)), num_spec=0, conv_dtype="bfloat16",
                     ssm_dtype=draw(st.sampled_from(["float32", "bfloat16"])), family="Nemotron-H")
    return spec, p_tp, d_tp


@FAST
@given(sglang_pairings())
def test_compare_agrees_with_the_simulation(case):
    m, p_tp, d_tp = case
    p, d = check_side(m, p_tp), check_side(m, d_tp)
    writes = sglang_writes(p, d)
    outcomes = compare(writes, p, d)
    assert sum(o.bad for o in outcomes) == simulate(writes, p, d)
    assert simulate(exact_writes(p, d), p, d) == 0 and not any(o.bad for o in compare(exact_writes(p, d), p, d))


@FAST
@given(sglang_pairings(), st.data())
def test_a_shifted_write_is_caught(case, data):
    m, p_tp, d_tp = case
    p, d = check_side(m, p_tp), check_side(m, d_tp)
    exact = list(exact_writes(p, d))
    i = data.draw(st.integers(0, len(exact) - 1))
    shift = data.draw(st.sampled_from([-1, 1]))
    w = exact[i]
    if w.src + shift < 0:
        shift = 1
    exact[i] = StateWrite(w.field, w.d_rank, w.p_rank, w.src + shift, w.dst, w.length)
    assert sum(o.bad for o in compare(exact, p, d)) > 0


@FAST
@given(sglang_pairings())
def test_who_sglang_gets_right(case):
    """Where one TP size divides the other, GDN and Mamba1 move right and Mamba2's conv never
    does across TP sizes (its rank's conv is [x | B | C] and the slice is one contiguous run)."""
    m, p_tp, d_tp = case
    if max(p_tp, d_tp) % min(p_tp, d_tp):
        return
    v = verdict(m, p_tp, d_tp)
    if m.variant == "mamba2" and p_tp != d_tp:
        assert v.bad_bytes(CONV) > 0 and v.bad_bytes(TEMPORAL) == 0
    else:
        assert v.right, v.sentence()
