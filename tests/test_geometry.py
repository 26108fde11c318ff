"""Engine geometry as vLLM 0.33 derives it on an H100, pinned by hand-worked numbers (0.34's
default block size: tests/test_releases.py).

Formulas (vLLM 0.33, ``Platform._align_hybrid_block_size`` and ``select_common_block_size``):
``a1 = kv_heads_rank · 2 · head_size · dt(kv)``; ``m = conv_bytes + ssm_bytes``;
``kba = lcm(max(16, block_size), alignment)`` (alignment 64 for GDN with prefix caching, else 1);
``B = kba · ceil(m / (kba · a1))`` rounded up to 16; page ``B · a1``; kernel ``B`` for FLASH_ATTN,
the largest of 16, 32, 64 dividing ``B`` for FLASHINFER.
"""

from __future__ import annotations

import pytest

from mambaxfer_cli.engines.vllm.engine import engine_layout
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.geometry import EngineFlags, backend, derive, kv_cache_dtype
from mambaxfer_cli.engines.vllm.kv_groups import vllm_grouping
from mambaxfer_cli.engines.vllm.releases import release
from mambaxfer_cli.readers.model_source import load_model

V0_33 = release("0.33")


def side(model: str, tp: int, **flags):
    spec = load_model(model)
    return engine_layout(spec, tp, EngineFlags(**{"release": V0_33, **flags}), vllm_grouping(spec.layers))


def geometry(model: str, tp: int, **flags) -> tuple:
    g = side(model, tp, **flags).geometry
    return (g.attention_bytes_per_token, g.state_bytes, g.block_size, g.kernel_block_size,
            g.blocks_per_logical, g.page_bytes)


# docs/reference.md's worked example: Qwen3.5-0.8B, bf16 KV, prefix caching off.
# m: TP1 conv (Q, K, V: 2048 channels each) 6144 · 3 rows · 2 B = 36864, temporal 16 heads ·
# 128 · 128 · 4 B (float32) = 1048576 -> 1085440; TP4 a quarter, 271360.
# a1: TP1 2 KV heads · 2 · 256 · 2 B = 2048; TP4 one head (replicated) = 1024.
# B: TP1 16 · ceil(1085440 / 32768) = 16 · 34 = 544; TP4 16 · ceil(271360 / 16384) = 16 · 17 = 272.
@pytest.mark.parametrize("tp, backend_name, expected", [
    (1, "FLASH_ATTN", (2048, 1085440, 544, 544, 1, 544 * 2048)),
    (4, "FLASH_ATTN", (1024, 271360, 272, 272, 1, 272 * 1024)),
    (1, "FLASHINFER", (2048, 1085440, 544, 32, 17, 544 * 2048)),     # 544 = 17 · 32
    (4, "FLASHINFER", (1024, 271360, 272, 16, 17, 272 * 1024)),      # 272 = 17 · 16
])
def test_spec_worked_example_qwen35_08b(tp, backend_name, expected):
    assert geometry("qwen3.5-0.8b", tp, attention_backend=backend_name, prefix_caching=False) == expected
    assert side("qwen3.5-0.8b", tp, prefix_caching=False).geometry.page_bytes == expected[5]


# vLLM 0.33's default turns prefix caching on, and GDN prefill checkpoints (FlashInfer's GDN
# kernel on Hopper) align kba to 64: TP1 64 · ceil(1085440 / (64 · 2048)) = 64 · 9 = 576;
# TP4 64 · ceil(271360 / (64 · 1024)) = 64 · 5 = 320.
def test_qwen35_08b_with_vllms_default_prefix_caching():
    assert geometry("qwen3.5-0.8b", 1) == (2048, 1085440, 576, 576, 1, 576 * 2048)
    assert geometry("qwen3.5-0.8b", 4) == (1024, 271360, 320, 320, 1, 320 * 1024)
    assert geometry("qwen3.5-0.8b", 1, attention_backend="FLASHINFER")[3:5] == (64, 9)
    assert geometry("qwen3.5-0.8b", 4, attention_backend="FLASHINFER")[3:5] == (64, 5)


# Nemotron-H-8B: x = 128 heads · 64 = 8192 channels, B and C 8 groups · 128 = 1024 each; 3 conv rows
# in bf16: TP1 conv 10240 · 3 · 2 = 61440; temporal 128 · 64 · 128 · 4 B (float32 by default) =
# 4194304; m = 4255744, halved at TP2 and quartered at TP4 (8 groups divide by both).
# a1 = 8 KV heads / TP · 2 · 128 · 2 B: 4096, 2048, 1024. B = 16 · ceil(m / (16 · a1)) = 16 · 65 = 1040
# at every TP (m / (16 · a1) = 64.94); FLASHINFER: 1040 = 65 · 16.
@pytest.mark.parametrize("tp, a1, m", [(1, 4096, 4255744), (2, 2048, 2127872), (4, 1024, 1063936)])
def test_nemotron_h_8b_by_hand(tp, a1, m):
    assert geometry("nemotron-h-8b", tp) == (a1, m, 1040, 1040, 1, 1040 * a1)
    assert geometry("nemotron-h-8b", tp, attention_backend="FLASHINFER")[3:5] == (16, 65)


# Jamba: x = 2 · 4096 = 8192 channels · 3 rows · 2 B = 49152; temporal 8192 · 16 · 2 B = 262144;
# m = 311296 at TP1, 38912 at TP8. a1: 8 KV heads of 128: 4096 at TP1, 1 head at TP8: 512.
# B = 16 · ceil(4.75) = 80 at both.
@pytest.mark.parametrize("tp, a1, m", [(1, 4096, 311296), (8, 512, 38912)])
def test_jamba_by_hand(tp, a1, m):
    assert geometry("jamba", tp) == (a1, m, 80, 80, 1, 80 * a1)


def test_requested_block_size_is_a_floor_and_an_alignment():
    # --block-size 144 on Qwen3.5-0.8B: kba = lcm(144, 64) = 576, which holds both states.
    assert geometry("qwen3.5-0.8b", 1, block_size=144)[2] == 576
    assert geometry("qwen3.5-0.8b", 4, block_size=144)[2] == 576
    # A requested size larger than needed is kept (rounded to the backend's step).
    assert geometry("jamba", 1, block_size=256)[2] == 256


def test_ssm_only_engines_keep_the_state_as_their_page():
    g = side("mamba-130m", 2).geometry
    assert (g.attention_bytes_per_token, g.blocks_per_logical, g.page_bytes) == (None, 1, g.state_bytes)


def test_kv_cache_dtype_sets_a1():
    assert geometry("jamba", 1, kv_cache_dtype="fp8")[0] == 2048     # 1 byte an element
    assert kv_cache_dtype("auto", "float16") == "float16"
    with pytest.raises(UserError, match="unknown KV-cache dtype 'int3'"):
        kv_cache_dtype("int3", "bfloat16")


def test_backends():
    assert backend("flashinfer").kernel_for(544) == 32
    assert backend("FLASH_ATTN").kernel_for(544) == 544
    with pytest.raises(UserError, match="none of which divides a block of 40 tokens"):
        backend("FLASHINFER").kernel_for(40)
    with pytest.raises(UserError, match="unknown attention backend 'XFORMERS'"):
        backend("XFORMERS")


def test_blocks_per_logical_override_is_marked():
    g = derive(311296, 4096, EngineFlags(release=V0_33, blocks_per_logical=5))
    assert (g.block_size, g.kernel_block_size, g.blocks_per_logical, g.overridden) == (80, 16, 5, True)
    assert g.derived_blocks_per_logical == 1 and g.to_dict()["vllm_derived"] is False
