"""layout: every rank's shards, offsets and sizes (docs/reference.md §1-2)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.startup import rank_layouts
from mambaxfer_cli.planning.layout import (
    Shard, check_tp, kv_head_shard, rank_layout, valid_tp_sizes,
)
from mambaxfer_cli.readers.model_config import spec_from_config

HF = Path(__file__).parent / "fixtures" / "hf-configs"


def load(fixture: str, **overrides):
    return spec_from_config(json.loads((HF / fixture).read_text()), name=fixture, source=fixture, **overrides)


JAMBA = "ai21labs__Jamba-v0.1.json"
NEMOTRON = "nvidia__Nemotron-H-8B-Base-8K.partial.json"
QWEN35_08B = "Qwen__Qwen3.5-0.8B.partial.json"
GRANITE = "ibm-granite__granite-4.0-h-tiny.partial.json"
CODESTRAL = "mistralai__Mamba-Codestral-7B-v0.1.json"

# Qwen3.5-27B's linear-attention dimensions (docs/reference.md §4): 16 k-heads, 48 v-heads, head dims 128.
QWEN35_27B = {"model_type": "qwen3_5", "text_config": {
    "model_type": "qwen3_5_text", "linear_num_key_heads": 16, "linear_num_value_heads": 48,
    "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    "num_hidden_layers": 64, "full_attention_interval": 4, "mamba_ssm_dtype": "float32",
    "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256}}


# docs/reference.md §4: the sub-projection dims vLLM derives, from the real config files.
@pytest.mark.parametrize("fixture, tp, dims", [
    (JAMBA, 1, (8192,)),
    (JAMBA, 4, (2048,)),
    (JAMBA, 8, (1024,)),
    (NEMOTRON, 1, (8192, 1024, 1024)),
    (NEMOTRON, 4, (2048, 256, 256)),
    (QWEN35_08B, 1, (2048, 2048, 2048)),
    (QWEN35_08B, 4, (512, 512, 512)),
])
def test_vllm_sub_projection_dims(fixture, tp, dims):
    for layout in rank_layouts(load(fixture), tp):
        assert layout.sub_projection_dims == dims


def test_vllm_sub_projection_dims_qwen35_27b():
    spec = spec_from_config(QWEN35_27B, name="qwen3.5-27b", source="")
    assert {layout.sub_projection_dims for layout in rank_layouts(spec, 8)} == {(256, 256, 768)}


def test_jamba_tp4_bytes():
    # conv_rows = 4 - 1 = 3, bf16: 6 bytes per channel; temporal 16 states * 2 bytes per channel.
    layout = rank_layout(load(JAMBA), 4, 3)
    assert layout.conv_rows == 3
    assert [(r.name, r.shard, r.unit_bytes, r.offset, r.size) for r in layout.regions] == [
        ("x", Shard(6144, 8192), 6, 0, 2048 * 6),
        ("ssm", Shard(6144, 8192), 32, 12288, 2048 * 32),
    ]
    assert (layout.conv_bytes, layout.ssm_bytes, layout.state_bytes) == (12288, 65536, 77824)


def test_nemotron_tp2_rank1():
    # x 4096 ch, B and C 512 ch (groups 4..7 of 8, 128 states each), 6 bytes per channel;
    # temporal: 64 heads of 64x128 float32 = 32768 bytes each.
    layout = rank_layout(load(NEMOTRON), 2, 1)
    assert [(r.name, r.unit, r.shard, r.offset, r.size) for r in layout.regions] == [
        ("x", "channel", Shard(4096, 8192), 0, 24576),
        ("B", "channel", Shard(512, 1024), 24576, 3072),
        ("C", "channel", Shard(512, 1024), 27648, 3072),
        ("ssm", "head", Shard(64, 128), 30720, 64 * 32768),
    ]
    assert layout.region("ssm").unit_bytes == 64 * 128 * 4


def test_num_spec_adds_conv_rows_for_mamba2_and_gdn():
    assert rank_layout(load(NEMOTRON, num_spec=2), 1, 0).region("x").unit_bytes == (3 + 2) * 2
    assert rank_layout(load(QWEN35_08B, num_spec=1), 1, 0).region("V").unit_bytes == (3 + 1) * 2
    assert rank_layout(load(JAMBA, num_spec=2), 1, 0).region("x").unit_bytes == 3 * 2


def test_qwen35_tp2_offsets():
    # Q, K, V 1024 channels each (8 heads of 128), then 8 v-heads of 128x128 float32.
    layout = rank_layout(load(QWEN35_08B), 2, 0)
    assert [(r.name, r.offset, r.size) for r in layout.regions] == [
        ("Q", 0, 6144), ("K", 6144, 6144), ("V", 12288, 6144), ("ssm", 18432, 8 * 65536)]


def test_granite_replicates_the_single_group():
    ranks = rank_layouts(load(GRANITE), 4)
    assert {r.region("B").shard for r in ranks} == {Shard(0, 128)}
    assert {r.region("C").shard for r in ranks} == {Shard(0, 128)}
    assert [r.region("x").shard for r in ranks] == [Shard(i * 768, (i + 1) * 768) for i in range(4)]
    assert [r.region("ssm").shard for r in ranks] == [Shard(i * 12, (i + 1) * 12) for i in range(4)]


def test_single_group_at_tp1_is_just_sharded():
    assert rank_layout(load(GRANITE), 1, 0).region("B").shard == Shard(0, 128)


def test_other_non_dividing_groups_are_an_error():
    with pytest.raises(UserError) as err:
        rank_layouts(load(CODESTRAL), 16)
    assert str(err.value) == (
        f"{CODESTRAL}: TP 16 does not divide n_groups = 8, and vLLM replicates B/C groups only when "
        f"n_groups == 1 (padding to n_eff = TP); TP sizes that work: 1, 2, 4, 8")


@pytest.mark.parametrize("fixture, tp, heads, works", [
    (JAMBA, 3, 32, "1, 2, 4, 8, 16, 32"),
    (GRANITE, 8, 12, "1, 2, 4, 12"),
    (NEMOTRON, 3, 32, "1, 2, 4, 8"),
    (QWEN35_08B, 32, 8, "1, 2, 4, 8"),
])
def test_vllm_start_up_check_comes_first(fixture, tp, heads, works):
    # ModelConfig.verify_with_parallel_config refuses before any layout exists, and the sizes
    # listed are only those vLLM starts.
    with pytest.raises(UserError) as err:
        rank_layouts(load(fixture), tp)
    assert f"vLLM does not start a TP-{tp} engine" in str(err.value)
    assert f"{heads} attention heads do not divide by TP {tp}" in str(err.value)
    assert "verify_with_parallel_config" in str(err.value)
    assert str(err.value).endswith(f"TP sizes that work: {works}")
    assert tp not in valid_tp_sizes(load(fixture))


@pytest.mark.parametrize("fixture, tp, dim, works", [
    (JAMBA, 3, "intermediate_size = 8192 (mamba1 'x' channels)", "1, 2, 4, 8, 16, 32, 64"),
    (GRANITE, 5, "intermediate_size = 3072 (mamba2 'x' channels)", "1, 2, 4, 8, 12, 16, 24, 48"),
    (NEMOTRON, 3, "intermediate_size = 8192", "1, 2, 4, 8"),
    (QWEN35_08B, 32, "num_k_heads = 16 (gdn 'Q' channels)", "1, 2, 4, 8, 16"),
])
def test_tp_not_dividing_names_dimension_and_working_sizes(fixture, tp, dim, works):
    # Without a num_attention_heads (vLLM reads 0), the layout's own dimensions decide.
    spec = replace(load(fixture), num_q_heads=None)
    with pytest.raises(UserError) as err:
        rank_layouts(spec, tp)
    assert f"TP {tp} does not divide {dim}" in str(err.value)
    assert str(err.value).endswith(f"TP sizes that work: {works}")


def test_heads_must_divide_too():
    # I = 8 * 12 is divisible by 8, but 12 heads are not.
    spec = spec_from_config({"model_type": "mamba2", "hidden_size": 48, "expand": 2, "num_heads": 12,
                             "head_dim": 8, "n_groups": 1, "state_size": 8, "conv_kernel": 4,
                             "num_hidden_layers": 1}, name="m", source="")
    with pytest.raises(UserError, match=r"TP 8 does not divide num_heads = 12 \(mamba2 'ssm' heads\)"):
        rank_layouts(spec, 8)
    assert valid_tp_sizes(spec) == [1, 2, 3, 4, 6, 12]


def test_valid_tp_sizes_qwen35_27b():
    spec = spec_from_config(QWEN35_27B, name="q", source="")
    # 16 would shard its layers, but its 24 attention heads do not divide by 16: vLLM does not start
    assert valid_tp_sizes(spec) == [1, 2, 4, 8]


@pytest.mark.parametrize("tp", [0, -1, True, 2.0, "2"])
def test_check_tp(tp):
    with pytest.raises(UserError, match="TP size must be a positive integer"):
        check_tp(tp)


def test_no_conv_rows_is_an_error():
    spec = load(JAMBA)
    from dataclasses import replace
    with pytest.raises(UserError, match="conv_kernel 1 leaves no conv state rows"):
        rank_layout(replace(spec, conv_kernel=1), 1, 0)


def test_kv_head_shards():
    jamba = load(JAMBA)                                     # 8 KV heads
    assert [kv_head_shard(jamba, 4, r) for r in range(4)] == [Shard(2 * r, 2 * r + 2) for r in range(4)]
    qwen = load(QWEN35_08B)                                 # 2 KV heads: TP 4 replicates each twice
    assert [kv_head_shard(qwen, 4, r) for r in range(4)] == [Shard(0, 1), Shard(0, 1), Shard(1, 2), Shard(1, 2)]
    assert kv_head_shard(load("state-spaces__mamba-130m-hf.json"), 2, 0) is None
    with pytest.raises(UserError,
                       match=r"TP 3 and the attention's 8 KV heads \(num_key_value_heads\) do not divide one another"):
        kv_head_shard(jamba, 3, 0)


def test_region_lookup_and_dict():
    layout = rank_layout(load(NEMOTRON), 2, 1)
    assert layout.region_at(0).name == "x"
    assert layout.region_at(24576).name == "B"
    assert layout.region_at(layout.state_bytes - 1).name == "ssm"
    assert layout.region_at(layout.state_bytes) is None
    assert Shard(0, 4).intersect(Shard(4, 8)) is None
    assert Shard(0, 5).intersect(Shard(4, 8)) == Shard(4, 5)
    d = layout.to_dict()
    assert (d["rank"], d["conv_rows"], d["conv_bytes"], d["ssm_bytes"]) == (1, 3, 30720, 64 * 32768)
    assert d["regions"][1] == {"name": "B", "kind": "conv", "unit": "channel", "unit_bytes": 6,
                               "shard": [512, 1024], "offset": 24576, "size": 3072}
