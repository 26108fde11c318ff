"""kv_groups: vLLM 0.33's grouping of cache layers into KV-cache groups and tensors (docs/reference.md §4)."""

from __future__ import annotations

import pytest

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.kv_groups import KVGrouping, describe, parse_grouping, vllm_grouping
from mambaxfer_cli.planning.model import ATTENTION as A, SSM as S
from mambaxfer_cli.readers.model_source import load_model


def test_jamba_seven_ssm_groups_then_attention_four_tensors():
    g = vllm_grouping(load_model("jamba").layers)
    # 28 SSM layers and 4 attention layers: G = 4 (28 >= 1.5 * 4), ceil(28 / 4) = 7 SSM groups.
    assert g.groups == (S,) * 7 + (A,)
    assert (g.tensors, g.ssm_tensors) == (4, 4)
    assert describe(g) == "ssm*7,attention"
    ssm_layers = [i for i in range(32) if i % 8 != 4]
    # The bucket's layer i goes to group i mod 7.
    assert g.members[:7] == tuple(tuple(ssm_layers[k::7]) for k in range(7))
    assert g.members[0] == (0, 8, 16, 24)          # 7 SSM layers per 8: the k-th of each block
    assert g.members[7] == (4, 12, 20, 28)


def test_no_attention_one_group_one_tensor_per_layer():
    g = vllm_grouping(load_model("mamba-130m").layers)
    assert g.groups == (S,)
    assert (g.tensors, g.ssm_tensors) == (24, 24)
    assert A not in g.groups


@pytest.mark.parametrize("preset, groups, tensors", [
    ("nemotron-h-8b", (S,) * 6 + (A,), 4),        # 24 SSM, 4 attention
    ("qwen3.5-0.8b", (S,) * 3 + (A,), 6),         # 18 SSM, 6 attention
    ("granite-4.0-h-tiny", (S,) * 9 + (A,), 4),   # 36 SSM, 4 attention
])
def test_real_models(preset, groups, tensors):
    g = vllm_grouping(load_model(preset).layers)
    assert (g.groups, g.tensors) == (groups, tensors)


def test_close_buckets_use_the_largest():
    # 5 < 1.5 * 4: G = 5, one group each.
    g = vllm_grouping((S, A, S, A, S, A, S, A, S))
    assert (g.groups, g.tensors, g.ssm_tensors) == ((S, A), 5, 5)
    assert g.members == ((0, 2, 4, 6, 8), (1, 3, 5, 7))


def test_buckets_ordered_by_first_layer():
    g = vllm_grouping((A, S, S, S, S, S, S, A))
    assert g.groups == (A,) + (S,) * 3


def test_uneven_bucket_and_ssm_tensors():
    # 10 SSM, 4 attention: G = 4, ceil(10 / 4) = 3 SSM groups of 4, 3, 3 layers.
    g = vllm_grouping((S,) * 10 + (A,) * 4)
    assert g.groups == (S, S, S, A)
    assert [len(m) for m in g.members] == [4, 3, 3, 4]
    assert (g.tensors, g.ssm_tensors) == (4, 4)


def test_parse_grouping():
    g = parse_grouping("ssm*7, attention", 4, None)
    assert g == KVGrouping((S,) * 7 + (A,), 4, 4)
    assert parse_grouping("attention,ssm*2", 3, 2).ssm_tensors == 2


@pytest.mark.parametrize("text, tensors, ssm_tensors, message", [
    ("ssm*7,mlp", 4, None, "bad item 'mlp'"),
    ("attention", 4, None, "must name at least one ssm group"),
    ("ssm*2", None, None, "--kv-groups needs --kv-tensors"),
    ("ssm*2", 0, None, "--kv-tensors must be >= 1"),
    ("ssm*2", 2, 3, "--ssm-tensors between 1 and --kv-tensors"),
])
def test_parse_grouping_errors(text, tensors, ssm_tensors, message):
    with pytest.raises(UserError, match=message):
        parse_grouping(text, tensors, ssm_tensors)
