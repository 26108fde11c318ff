"""vLLM releases as data: the registry, each release's rules, and the answers that differ between
0.33 and 0.34, pinned from vLLM's code of each release and hand-worked formulas.

Block sizes: ``Platform._align_hybrid_block_size`` (``platforms/interface.py``, the same code in both
releases) takes ``kba = lcm(max(smallest kernel block, block_size), checkpoint alignment)`` and
``B = kba · ceil(m / (kba · a1))``; without ``--block-size`` the block size vLLM starts from is
``CacheConfig.DEFAULT_BLOCK_SIZE`` (``config/cache.py``): 16 in 0.33, 64 in 0.34.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.engine import engine_layout
from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.engines.vllm.handshake import PUSH, refusals
from mambaxfer_cli.engines.vllm.kv_groups import vllm_grouping
from mambaxfer_cli.engines.vllm.plan import PlanOptions, build_plan
from mambaxfer_cli.engines.vllm.releases import NEWEST, RELEASES, release
from mambaxfer_cli.engines.vllm.proof.check import check_plan
from mambaxfer_cli.engines.vllm.installed import default_release
from mambaxfer_cli.readers.model_source import load_model

V0_33, V0_34 = release("0.33"), release("0.34")

HF = Path(__file__).parent / "fixtures" / "hf-configs"
BAMBA = str(HF / "bamba-9b-dims.partial.json")
NANO = str(HF / "nvidia__NVIDIA-Nemotron-Nano-9B-v2.partial.json")
FALCON = str(HF / "tiiuae__Falcon-H1-0.5B-Base.partial.json")


def side(model: str, tp: int, rel, **flags):
    spec = load_model(model)
    return engine_layout(spec, tp, EngineFlags(release=rel, **flags), vllm_grouping(spec.layers))


def plan(model: str, p_tp: int, d_tp: int, rel, semantics: str = "vllm", **flags):
    engine = EngineFlags(release=rel, num_blocks=4096, **flags)
    return build_plan(load_model(model), p_tp, d_tp, PlanOptions(semantics=semantics, prefill=engine, decode=engine))


# --- the registry ----------------------------------------------------------------------------------

def test_the_registry_names_each_release_and_refuses_unknown_ones():
    assert [r.name for r in RELEASES] == ["0.33", "0.34"] and NEWEST is V0_34
    assert release("0.33") is V0_33 and release("0.33.0") is V0_33
    assert release("0.34.1") is V0_34 and release("0.34.0.dev12+g1234abc") is V0_34
    with pytest.raises(UserError, match=r"unknown vLLM release '0.35'; mambaxfer knows 0.33, 0.34"):
        release("0.35")
    with pytest.raises(UserError, match="unknown vLLM release 'latest'"):
        release("latest")


def test_each_release_as_vllm_states_it():
    # CacheConfig.DEFAULT_BLOCK_SIZE and nixl/metadata.py NIXL_CONNECTOR_VERSION of each wheel.
    assert (V0_33.version, V0_33.default_block_size, V0_33.connector_version) == ("0.33.0", 16, 15)
    assert (V0_34.version, V0_34.default_block_size, V0_34.connector_version) == ("0.34.0", 64, 16)
    # vLLM's order: the TP sizes before any metadata, the hash, then add_remote_agent's checks; last
    # the next() over attention groups in _build_local_splits_from_plan and _build_fa_remote.
    # 0.33's asserts on the remote's regions (a drafter grouped otherwise) follow its host-buffer check.
    assert [c.__name__ for c in V0_33.pull_checks] == [
        "tp_sizes", "compat_hash", "block_size", "dcp_sizes", "prefix_caching", "host_buffer", "draft_regions",
        "mla_block_lens", "head_sharded", "attention_free"]
    # 0.34 pairs regions by advertised layers after the hash (its push rule runs right after), and
    # _pair_ssm_regions refuses groups that differ before the block sizes are compared.
    assert [c.__name__ for c in V0_34.push_checks] == [
        "tp_sizes", "compat_hash", "advertised_layers", "push_identical_blocks", "draft_groups", "block_size",
        "dcp_sizes", "prefix_caching", "host_buffer", "mla_block_lens", "head_sharded", "attention_free"]


@pytest.mark.parametrize("installed, expected, note", [
    (None, "0.34", None),                   # none installed: the newest known
    ("0.33.0", "0.33", None),
    ("0.34.2", "0.34", None),
    ("0.35.0", "0.34", "newer than the releases mambaxfer knows"),
    ("0.31.1", "0.33", "older than the releases mambaxfer knows"),
])
def test_the_default_release_follows_the_installed_vllm(installed, expected, note):
    found = default_release(installed, probe=False)
    assert found.release.name == expected
    assert (found.note is None) if note is None else (note in found.note and installed in found.note)


# --- geometry: the default block size ---------------------------------------------------------------

# (model, flags, TP sizes, 0.33's blocks, 0.34's blocks). Hand-worked, FLASH_ATTN (a1 = KV heads per
# rank · 2 · head size · 2 B):
# Jamba m = 311296 B, a1 = 4096 at TP1: 16·ceil(4.75) = 80; 64·ceil(1.19) = 128 (halved alike at TP2, 4).
# Nemotron-H-8B m = 4255744, a1 = 4096: 16·ceil(64.94) = 1040; 64·ceil(16.23) = 1088.
# Granite-4.0-H-Tiny conv (3072 + 2·128) · 3 · 2 = 19968, temporal 48·64·128·2 = 786432, m = 806400,
#   a1 = 4 · 2 · 128 · 2 = 2048: 16·ceil(24.6) = 400; 64·ceil(6.15) = 448.
# Bamba-9B m = 50688 + 2097152 = 2147840, a1 = 4096: 16·ceil(32.77) = 528; 64·ceil(8.19) = 576.
# Qwen3.5-0.8B, prefix caching off (no GDN checkpoint alignment): m = 1085440 / 271360 / 135680,
#   a1 = 2048 / 1024 / 1024: 544 / 272 / 144 (16-token steps); 576 / 320 / 192 (64-token steps).
# Falcon-H1-0.5B m = 403968 (TP1), a1 = 512: 16·ceil(49.3) = 800; 64·ceil(12.33) = 832;
#   TP4 m = 102144, a1 = 256: 16·ceil(24.94) = 400; 64·ceil(6.23) = 448.
BLOCKS = [
    ("jamba", {}, (1, 2, 4), (80, 80, 80), (128, 128, 128)),
    ("nemotron-h-8b", {}, (1, 2, 4), (1040, 1040, 1040), (1088, 1088, 1088)),
    ("granite-4.0-h-tiny", {}, (1, 2), (400, 400), (448, 448)),
    (BAMBA, {}, (1, 2), (528, 528), (576, 576)),
    ("qwen3.5-0.8b", {"prefix_caching": False}, (1, 4, 8), (544, 272, 144), (576, 320, 192)),
    (FALCON, {}, (1, 2, 4), (800, 800, 400), (832, 832, 448)),
]


@pytest.mark.parametrize("model, flags, tps, old, new", BLOCKS)
def test_default_block_sizes_per_release(model, flags, tps, old, new):
    assert tuple(side(model, tp, V0_33, **flags).geometry.block_size for tp in tps) == old
    assert tuple(side(model, tp, V0_34, **flags).geometry.block_size for tp in tps) == new
    # An explicit --block-size 64 gives 0.34's default geometry in 0.33 too; any explicit size is
    # the same in both releases.
    assert tuple(side(model, tp, V0_33, block_size=64, **flags).geometry.block_size for tp in tps) == new
    same = [{k: v for k, v in side(model, tps[-1], rel, block_size=144, **flags).geometry.to_dict().items()
             if k != "vllm_version"} for rel in RELEASES]
    assert same[0] == same[1]


def test_qwen35_default_flags_give_576_and_320_in_both_releases():
    # Prefix caching on (vLLM's default for hybrids) aligns GDN blocks to FlashInfer's 64-token
    # checkpoints on H100: 64·ceil(1085440 / (64·2048)) = 576, 64·ceil(271360 / (64·1024)) = 320.
    for rel in RELEASES:
        assert (side("qwen3.5-0.8b", 1, rel).geometry.block_size,
                side("qwen3.5-0.8b", 4, rel).geometry.block_size) == (576, 320)


# --- verdicts that flip with the release --------------------------------------------------------------

def test_qwen35_p_tp4_d_tp2_without_prefix_caching_flips_to_refused():
    old, new = (plan("qwen3.5-0.8b", 4, 2, rel, prefix_caching=False) for rel in (V0_33, V0_34))
    # 0.33: P 272 -> D 544, ratio 2, one attention source (P TP 4 holds head 0 on ranks 0, 1).
    assert old.verdict.accepts and check_plan(old).verdict == "pass"
    assert [r.message for r in new.verdict.refusals] == [
        "Local block size 576 is not divisible by remote block size 320 or vice versa."]


def test_qwen35_p_tp8_d_tp2_without_prefix_caching_flips_to_accepted():
    old, new = (plan("qwen3.5-0.8b", 8, 2, rel, prefix_caching=False) for rel in (V0_33, V0_34))
    assert [r.message for r in old.verdict.refusals] == [
        "Local block size 544 is not divisible by remote block size 144 or vice versa."]
    # 0.34: 192 -> 576, ratio 3; D rank 0 reads attention from P0 only (P0..P3 all hold head 0).
    assert new.verdict.accepts and new.verdict.needs_remote_num_tokens
    assert "remote-num-tokens" in [w.code for w in new.warnings]
    assert check_plan(new).verdict == "pass"


def test_qwen35_p_tp1_d_tp4_flashinfer_without_prefix_caching_flips_to_accepted():
    old, new = (plan("qwen3.5-0.8b", 1, 4, rel, prefix_caching=False, attention_backend="FLASHINFER")
                for rel in (V0_33, V0_34))
    # 0.33: 544 = 17·32 and 272 = 17·16, kernels 32 and 16: D's 16 is no multiple of P's 32.
    assert [r.message for r in old.verdict.refusals] == [
        "Local block size 16 is not divisible by remote block size 32 or vice versa."]
    # 0.34: 576 = 9·64 and 320 = 5·64: equal kernels, 9 and 5 per logical block (no prefix caching).
    g = (new.prefill.geometry, new.decode.geometry)
    assert [(x.kernel_block_size, x.blocks_per_logical) for x in g] == [(64, 9), (64, 5)]
    assert new.verdict.accepts and new.verdict.needs_remote_num_tokens
    assert check_plan(new).verdict == "pass"


def test_falcon_h1_p_tp4_d_tp2_flips_from_corrupt_to_refused():
    old, new = (plan(FALCON, 4, 2, rel) for rel in (V0_33, V0_34))
    # 0.33: 400 -> 800, accepted, but n_groups = 1 makes vLLM's B/C offsets wrong (#55208).
    assert old.verdict.accepts and "vllm-replicated-groups" in [w.code for w in old.warnings]
    assert check_plan(old).verdict == "fail"
    assert [r.message for r in new.verdict.refusals] == [
        "Local block size 832 is not divisible by remote block size 448 or vice versa."]


# --- 0.33 corrected: head-sharded reads, the receive-side rearrangement ---------------------------------

@pytest.mark.parametrize("rel", RELEASES)
def test_qwen35_p_tp8_d_tp1_is_refused_as_head_sharded_in_both_releases(rel):
    # P 192 -> D 576 (ratio 3); D0's attention sources are P0 (head 0) and P4 (head 1): vLLM's
    # _build_local_splits_from_plan asserts, and P ranks that replicate a head are not exempt.
    p = plan("qwen3.5-0.8b", 8, 1, rel)
    assert (p.prefill.kernel_tokens, p.decode.kernel_tokens) == (192, 576)
    assert [r.to_dict() for r in p.verdict.refusals] == [{
        "code": "head-sharded-block-size",
        "message": "Head-sharded attention reads with P_TP > D_TP and heterogeneous block sizes are not supported"}]
    assert check_plan(p).verdict == "refused"


@pytest.mark.parametrize("rel", RELEASES)
def test_accepted_unequal_kernel_blocks_pass_byte_by_byte(rel):
    # Equal TP, P --block-size 576, D 1152: D holds both KV heads, reads each P block into one half
    # of its kernel block, and kv_postprocess_blksize_on_receive puts each head's tokens in order.
    spec = load_model("qwen3.5-0.8b")
    p_flags = EngineFlags(release=rel, block_size=576, num_blocks=4096)
    d_flags = EngineFlags(release=rel, block_size=1152, num_blocks=2048)
    p = build_plan(spec, 1, 1, PlanOptions(semantics="vllm", prefill=p_flags, decode=d_flags))
    assert p.verdict.accepts and p.received_sub_blocks == 2
    assert not [w for w in p.warnings if w.code.startswith("vllm-")]
    assert check_plan(p).verdict == "pass"


def test_the_rearrangement_is_what_makes_those_reads_right(monkeypatch):
    # Without vLLM's post-receive permutation the same reads leave D's two heads interleaved.
    from mambaxfer_cli.engines.vllm.plan import Plan

    spec = load_model("qwen3.5-0.8b")
    p = build_plan(spec, 1, 1, PlanOptions(semantics="vllm", prefill=EngineFlags(block_size=576, num_blocks=4096),
                                           decode=EngineFlags(block_size=1152, num_blocks=2048)))
    monkeypatch.setattr(Plan, "received_sub_blocks", property(lambda self: 1))
    result = check_plan(p)
    assert result.verdict == "fail"
    assert {(d.region, d.first.reason) for d in result.simulation.damage} == {("kv", "head 1 read as head 0")}


def test_the_received_layout_is_vllms_permutation_of_ds_layout():
    # kv_postprocess_blksize_on_receive: [r][H][n][C] -> [H][r·n][C]. token_offset places token t of
    # head h as received; permuting those positions as vLLM does gives D's own [H][r·n] layout.
    import numpy as np

    from mambaxfer_cli.engines.vllm.proof.pages import token_offset

    heads, kernel, r = 3, 12, 4
    received = np.empty(heads * kernel, dtype=np.int64)
    for h in range(heads):
        for t in range(kernel):
            received[token_offset(heads, kernel, r, h, t)] = h * kernel + t
    permuted = received.reshape(r, heads, kernel // r).transpose(1, 0, 2).reshape(-1)
    assert permuted.tolist() == list(range(heads * kernel))
    assert [token_offset(heads, kernel, 1, h, t) for h in range(heads) for t in range(kernel)] == \
        list(range(heads * kernel))


# --- descriptor IDs of short groups ---------------------------------------------------------------------

def _one_block_per_group(model: str, rel):
    spec = load_model(model)
    groups = len(vllm_grouping(spec.layers).groups)
    blocks = ";".join(str(100 + g) for g in range(groups))
    engine = EngineFlags(release=rel, num_blocks=1000)
    return build_plan(spec, 1, 1, PlanOptions(prefill=engine, decode=engine, prefill_blocks=blocks,
                                              decode_blocks=blocks))


def test_bamba_posts_119_ids_under_034_and_123_under_033():
    # Bamba-9B: 29 Mamba2 and 3 attention layers -> G = 3 tensors, 10 SSM groups (9 of 3 layers, the
    # last of 2) and 1 attention group; k = 4 regions per SSM layer; block 100 + g in group g, N = 1000.
    old, new = (_one_block_per_group(BAMBA, rel) for rel in (V0_33, V0_34))
    (r_old,), (r_new,) = old.descriptors.reads, new.descriptors.reads
    # 0.33 (_compute_desc_ids): every group over every SSM tensor: 10·3·4 + 3 attention = 123.
    assert len(r_old.local_ids) == 123 and r_old.group_counts[9] == 12
    # 0.34: a group's IDs only over the regions holding one of its layers: 9·12 + 8 + 3 = 119.
    assert len(r_new.local_ids) == 119 and r_new.group_counts[9] == 8
    # Group 9's IDs: attention descriptors R·N = 3000 first, then q·L + 109 for q = 0 .. 11 / 0 .. 7.
    assert r_old.local_ids[108:120].tolist() == [3000 + q * 1000 + 109 for q in range(12)]
    assert r_new.local_ids[108:116].tolist() == [3000 + q * 1000 + 109 for q in range(8)]
    assert new.descriptors.to_dict()["group_tensors"] == [3] * 9 + [2, 3]
    for p in (old, new):
        assert check_plan(p).verdict == "pass"


def test_nemotron_nano_9b_v2s_short_group_posts_12_ids_per_block_under_034():
    # 27 Mamba2, 4 attention layers -> G = 4; SSM group 6 holds 3 layers: IDs 4106 .. 15106 (0.34)
    # against 4106 .. 19106 (0.33), attention descriptors R·N = 4000 first.
    old, new = (_one_block_per_group(NANO, rel) for rel in (V0_33, V0_34))
    ids_old, ids_new = old.descriptors.reads[0].local_ids, new.descriptors.reads[0].local_ids
    assert [i for i in ids_old.tolist() if i % 1000 == 106] == [4106 + q * 1000 for q in range(16)]
    assert [i for i in ids_new.tolist() if i % 1000 == 106] == [4106 + q * 1000 for q in range(12)]
    assert check_plan(new).verdict == "pass"


def test_full_groups_post_the_same_ids_in_both_releases():
    for model in ("jamba", "qwen3.5-0.8b", "nemotron-h-8b"):
        old, new = (_one_block_per_group(model, rel) for rel in (V0_33, V0_34))
        assert [r.local_ids.tolist() for r in old.descriptors.reads] == \
            [r.local_ids.tolist() for r in new.descriptors.reads]


# --- the handshake across releases --------------------------------------------------------------------

def test_a_033_engine_and_a_034_engine_refuse_each_other_with_vllms_message():
    spec = load_model("qwen3.5-0.8b")
    options = PlanOptions(prefill=EngineFlags(release=V0_33, block_size=144),
                          decode=EngineFlags(release=V0_34, block_size=144))
    p = build_plan(spec, 1, 4, options)
    assert p.releases == "vLLM 0.33 (P) / 0.34 (D)"
    (found,) = p.verdict.refusals
    assert found.code == "compat-hash"
    assert found.message.startswith(
        "NIXL compatibility hash mismatch. Prefill and decode instances have incompatible configurations. "
        "This may be due to: different vLLM versions, models, dtypes, KV cache layouts, attention backends, etc.")
    assert "vLLM version 0.34.0 vs 0.33.0" in found.message and "NIXL connector version 16 vs 15" in found.message


def test_tp_sizes_are_refused_before_the_hash():
    spec = load_model("mamba-130m")
    options = PlanOptions(prefill=EngineFlags(release=V0_33), decode=EngineFlags(release=V0_34))
    p = build_plan(spec, 2, 3, options)
    assert [r.code for r in p.verdict.refusals] == ["tp-sizes", "compat-hash", "no-attention"]


@pytest.mark.parametrize("rel, code", [(V0_34, "push-block-sizes"), (V0_33, "head-sharded-block-size")])
def test_qwen35_push_1p8d(rel, code):
    # P (local in push) 576 tokens, D 192: 0.34 refuses identical blocks right after the hash; 0.33
    # maps block ratio 3 and meets D's two head sources (D0..D3 hold head 0, D4..D7 head 1).
    p, d = side("qwen3.5-0.8b", 1, rel), side("qwen3.5-0.8b", 8, rel)
    found = refusals(p, d, PUSH)
    assert [r.code for r in found] == [code]
    if rel is V0_34:
        assert found[0].message == (
            "NixlPushConnector requires identical P/D block sizes. Kernel block size and kernel blocks per "
            "logical block: local (576, 1), remote engine D (192, 1).")


# --- the GPU --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("gpu_name, flags, expected", [
    # H100/H200 (SM 9.0): FlashInfer GDN prefill, checkpoints every 64 tokens: 576 / 320.
    ("H100", {}, (576, 320)), ("H200", {}, (576, 320)),
    # A100 (SM 8.0): Triton GDN prefill, no alignment: 16·ceil(33.1) = 544, 16·ceil(16.6) = 272.
    ("A100", {}, (544, 272)),
    # B200, CUDA 13 (SM 10.0): FlashInfer GDN (linear_key_head_dim 128), FLASH_ATTN's FA4 head-size-256
    # kernel on 128-token blocks: kba = 128, 128·ceil(4.14) = 640, 128·ceil(2.07) = 384.
    ("B200", {"attention_backend": "FLASH_ATTN"}, (640, 384)),
    # B200 with CUDA 12: Triton GDN, still FA4's 128-token kernels: 640, 384 (the same kba of 128).
    ("B200/cu12", {"attention_backend": "FLASH_ATTN"}, (640, 384)),
    # Hopper with --gdn-prefill-backend triton: no alignment.
    ("H100", {"gdn_prefill_backend": "triton"}, (544, 272)),
])
def test_qwen35_p_tp1_d_tp4_blocks_per_gpu_in_033(gpu_name, flags, expected):
    from mambaxfer_cli.engines.vllm.gpu import gpu

    got = tuple(side("qwen3.5-0.8b", tp, V0_33, gpu=gpu(gpu_name), **flags).geometry.block_size for tp in (1, 4))
    assert got == expected


def test_a100_takes_064s_default_block_in_034():
    # No GDN alignment on A100, but 0.34 starts from 64 tokens: 64·ceil(8.28) = 576, 64·ceil(4.14) = 320.
    from mambaxfer_cli.engines.vllm.gpu import gpu

    assert tuple(side("qwen3.5-0.8b", tp, V0_34, gpu=gpu("A100")).geometry.block_size for tp in (1, 4)) == (576, 320)


def test_vllm_picks_flashinfer_on_sm10():
    # platforms/cuda.py _get_backend_priorities: FLASHINFER first on SM 10.x (causal, non-MLA),
    # FLASH_ATTN first elsewhere. On B200, Qwen3.5 runs FlashInfer's pages: 576 = 9·64, 320 = 5·64
    # (128 divides neither, so its larger trtllm-gen pages do not apply here).
    from mambaxfer_cli.engines.vllm.gpu import gpu

    for rel in RELEASES:
        g1, g4 = (side("qwen3.5-0.8b", tp, rel, gpu=gpu("B200")).geometry for tp in (1, 4))
        assert (g1.attention_backend, g1.block_size, g1.kernel_block_size) == ("FLASHINFER", 576, 64)
        assert (g4.block_size, g4.kernel_block_size) == (320, 64)
    assert side("jamba", 1, V0_34, gpu=gpu("H100")).geometry.attention_backend == "FLASH_ATTN"


# _resolve_gdn_prefill_backend (model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py, the same in
# both releases), run on a stand-in CUDA platform with linear_key_head_dim = 128: (capability, CUDA
# runtime) -> backend for auto, triton, cutedsl.
@pytest.mark.parametrize("capability, cuda, expected", [
    ((9, 0), 13, ("flashinfer", "triton", "triton")), ((8, 0), 13, ("triton", "triton", "triton")),
    ((8, 9), 13, ("triton", "triton", "triton")), ((10, 0), 13, ("flashinfer", "triton", "cutedsl")),
    ((10, 0), 12, ("triton", "triton", "triton")), ((10, 3), 13, ("flashinfer", "triton", "cutedsl")),
    ((12, 0), 13, ("flashinfer", "triton", "triton")), ((12, 0), 12, ("triton", "triton", "triton")),
])
def test_gdn_prefill_backend_as_vllm_resolves_it(capability, cuda, expected):
    from mambaxfer_cli.engines.vllm.gpu import Gpu, gdn_prefill_backend

    device = Gpu("x", capability, cuda)
    assert tuple(gdn_prefill_backend(device, 128, choice) for choice in (None, "triton", "cutedsl")) == expected
    # Blackwell needs linear_key_head_dim 128; Hopper does not.
    assert gdn_prefill_backend(device, 64) == ("flashinfer" if capability == (9, 0) else "triton")


def test_unknown_gpus_and_gdn_backends_are_user_errors():
    from mambaxfer_cli.engines.vllm.gpu import gdn_prefill_backend, gpu

    assert gpu("sm90").capability == (9, 0) and gpu("10.3").capability == (10, 3)
    assert gpu("rtx pro 6000").name == "RTX PRO 6000" and gpu("b200/cu12").cuda == 12
    with pytest.raises(UserError, match="unknown GPU 'P100'"):     # SM 6.0: vLLM runs from 7.0
        gpu("P100")
    with pytest.raises(UserError, match="not one for NVIDIA GPUs"):
        gdn_prefill_backend(gpu("H100"), 128, "hip")
