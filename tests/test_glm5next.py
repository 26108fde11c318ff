"""GLM-5-Next (vLLM's models/glm5next): KDA beside sparse MLA with the kpool indexer's caches. The
config as transformers' Glm5NextTextConfig reads it, the blocks vLLM derives (aligned to the
indexer's kernel pages), the sparse backend and KV dtype per GPU, BLHNC, the handshake across TP
sizes (one block size on both sides: the tail ring's region does not grow with the block), and
the indexer pages moved and proved byte by byte. Numbers follow vLLM's formulas, written out."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest

from cli_run import assert_refused, assert_user_error, run_cli
from mambaxfer_cli.engines.vllm import indexer_caches
from mambaxfer_cli.engines.vllm.families import glm5next
from mambaxfer_cli.engines.vllm.engine import STATE, engine_layout
from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.engines.vllm.gpu import gpu as gpu_named
from mambaxfer_cli.engines.vllm.kv_layout import layout_error, resolved_layout
from mambaxfer_cli.engines.vllm.plan import PlanOptions, build_plan
from mambaxfer_cli.engines.vllm.releases import release as vllm_release
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.kv_groups import vllm_grouping
from mambaxfer_cli.engines.vllm.proof import indexer_caches as proof
from mambaxfer_cli.engines.vllm.proof.check import check_plan
from mambaxfer_cli.readers.model_config import spec_from_config
from mambaxfer_cli.readers.model_source import compiled_presets, load_model

PRESET = "glm-5-next"
H, D, K = 64, 128, 4                # linear_num_heads, linear_head_dim, linear_conv_kernel_dim
LATENT = 512                        # kv_lora_rank + qk_rope_head_dim (0: NoPE)
KPOOL, INDEX_DIM = 16, 128


def state_bytes(tp: int) -> int:
    """kda_state_shape in bf16 conv and float32 SSM: conv (3·H·d/T, K−1), SSM (H/T, d, d)."""
    return 3 * H * D // tp * (K - 1) * 2 + H // tp * D * D * 4


def config(**text) -> dict:
    out = copy.deepcopy(compiled_presets()[PRESET]["config"])
    out["text_config"].update(text)
    return out


def glm(**text):
    return spec_from_config(config(**text), name="glm", source="test")


def plan(p_tp, d_tp, block=None, semantics="vllm", gpu="H100", request_blocks=1, **text):
    flags = EngineFlags(num_blocks=64, block_size=block, gpu=gpu_named(gpu))
    return build_plan(glm(**text), p_tp, d_tp, PlanOptions(semantics=semantics, prefill=flags, decode=flags,
                                                           request_blocks=request_blocks))


def test_the_preset_reads_as_transformers_fills_it():
    model = load_model(PRESET)
    assert (model.variant, model.family, model.mla) == ("kda", "GLM-5-Next", True)
    assert model.params == {"num_heads": H, "head_dim": D} and model.conv_kernel == K
    # No layer_types: Glm5NextTextConfig makes layer i MLA where i % 4 == 3.
    assert [i for i, kind in enumerate(model.layers) if kind == "attention"] == list(range(3, 45, 4))
    assert (model.num_kv_heads, model.head_size, model.num_q_heads) == (1, LATENT, 64)
    assert (model.conv_dtype, model.ssm_dtype) == ("bfloat16", "float32")      # kda_state_dtype
    g = model.kpool_indexer
    assert (g.index_kpool, g.index_head_dim, g.index_topk, g.kv_lora_rank, g.qk_nope_head_dim) == (
        KPOOL, INDEX_DIM, 2048, 512, 256)


def test_layer_types_and_linear_attn_config_read_as_transformers_reads_them():
    # full_attention is read as indexed_attention; linear_attn_config's keys win over the flat ones.
    types = ["linear_attention", "full_attention"] * 2
    spec = glm(num_hidden_layers=4, layer_types=types, linear_attn_config={"num_heads": 32, "head_dim": 64,
                                                                          "short_conv_kernel_size": 3})
    assert spec.layers == ("ssm", "attention") * 2
    assert spec.params == {"num_heads": 32, "head_dim": 64} and spec.conv_kernel == 3


@pytest.mark.parametrize("text, words", [
    ({"qk_rope_head_dim": 64}, "Expecting NoPE for the DSA attention layers, but got 64 as RoPE dim"),
    ({"q_lora_rank": None}, "the `q_lora_rank` is strictly required"),
    ({"index_topk": 2050}, "index_topk (2050) must be divisible by index_kpool (16)"),
    ({"index_kpool": 1, "index_topk": 2048}, "Glm5NextIndexerCache expects index_kpool > 1"),
    ({"index_kpool_always_select_tail": False}, "requires index_kpool_always_select_tail=True"),
    ({"num_key_value_heads": 8}, "must be the same as num_key_value_heads (8)"),
])
def test_configs_transformers_or_vllm_refuse_are_one_line(tmp_path, text, words):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config(**text)))
    assert_refused(run_cli("plan", "--model", str(path), "--p-tp", "1", "--d-tp", "1"), words)


@pytest.mark.parametrize("text", [{"index_kpool": 1, "index_topk": 2048}, {"index_kpool_always_select_tail": False}])
def test_vllms_indexer_refusals_are_vllms_alone(tmp_path, text):
    # SGLang's DSA indexer takes either (layers/attention/dsa/dsa_indexer_kpool.py): its plan answers.
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config(**text)))
    assert_refused(run_cli("plan", "--model", str(path), "--p-tp", "1", "--d-tp", "1"), "vLLM does not build")
    done = run_cli("plan", "--model", str(path), "--p-tp", "1", "--d-tp", "1", "--engine", "sglang")
    assert done.code == 0 and "vLLM" not in done.stderr, done.stderr


@pytest.mark.parametrize("tp, block", [(1, 4608), (2, 2560), (4, 1536), (8, 1024)])
def test_blocks_align_to_the_indexers_kernel_pages(tp, block):
    # _align_hybrid_block_size with the indexer's backend first: kernel_block_alignment_size
    # max(16·32, 128) = 512, then the smallest block of 512-token steps whose latent page (1024 B a
    # token in bf16) holds the state.
    side = engine_layout(load_model(PRESET), tp, EngineFlags(), vllm_grouping(load_model(PRESET).layers))
    g = side.geometry
    assert g.attention_bytes_per_token == LATENT * 2
    assert g.block_size == block == 512 * -(-state_bytes(tp) // (512 * 1024))
    assert (g.kernel_block_size, g.blocks_per_logical) == (block, 1)      # packed rows: never split
    assert g.attention_backend == "FLASHINFER_MLA_SPARSE_SM90" and side.packed


def test_blackwell_runs_fp8_latents_on_flashinfers_trtllm_kernel():
    # Glm5NextModelConfig: --kv-cache-dtype auto becomes fp8 on SM 10.x (512 B a token).
    model = load_model(PRESET)
    side = engine_layout(model, 1, EngineFlags(gpu=gpu_named("B200")), vllm_grouping(model.layers))
    assert (side.geometry.attention_backend, side.geometry.kv_cache_dtype) == ("FLASHINFER_MLA_SPARSE", "fp8")
    assert side.geometry.attention_bytes_per_token == LATENT
    assert side.geometry.block_size == 512 * -(-state_bytes(1) // (512 * 512))
    # An explicit dtype stays.
    bf16 = engine_layout(model, 1, EngineFlags(gpu=gpu_named("B200"), kv_cache_dtype="bfloat16"),
                         vllm_grouping(model.layers))
    assert bf16.geometry.attention_bytes_per_token == LATENT * 2


@pytest.mark.parametrize("gpu, words, code", [
    ("A100", "vLLM does not start a GLM-5-Next engine on A100 (SM 8.0, CUDA 13): the sparse MLA backends run on", 1),
    ("RTX PRO 6000", "mambaxfer does not model GLM-5-Next on SM 12.x", 2),
])
def test_gpus_without_a_modelled_sparse_backend_are_one_line(gpu, words, code):
    # vLLM's refusal is a verdict (1); what mambaxfer does not model, a usage error (2)
    result = run_cli("plan", "--model", PRESET, "--p-tp", "1", "--d-tp", "1", "--gpu", gpu)
    (assert_refused if code == 1 else assert_user_error)(result, words)


def test_a_latent_blackwells_kernel_does_not_run_stops_the_engine():
    with pytest.raises(UserError, match="qk_nope_head_dim 256 and kv_lora_rank 512"):
        engine_layout(glm(qk_nope_head_dim=128), 1, EngineFlags(gpu=gpu_named("B200")),
                      vllm_grouping(glm().layers))


@pytest.mark.parametrize("gpu, pick", [("H100", "FLASHINFER_MLA_SPARSE_SM90"), ("B200", "FLASHINFER_MLA_SPARSE")])
def test_attention_backend_may_name_vllms_pick_and_no_other(gpu, pick):
    """get_attn_backend_cls validates a selected backend and raises where it is invalid: a dense MLA
    backend ("sparse not supported"), the other GPU family's sparse one ("compute capability")."""
    plain = run_cli("plan", "--model", PRESET, "--p-tp", "1", "--d-tp", "1", "--gpu", gpu, "--format", "json")
    named = run_cli("plan", "--model", PRESET, "--p-tp", "1", "--d-tp", "1", "--gpu", gpu, "--format", "json",
                    "--attention-backend", pick)
    assert plain.code == named.code == 0 and json.loads(plain.stdout) == json.loads(named.stdout)
    other = next(name for name in ("FLASHINFER_MLA_SPARSE_SM90", "FLASHINFER_MLA_SPARSE") if name != pick)
    for backend, reason in (("TRITON_MLA", "sparse not supported"), (other, "compute capability not supported")):
        assert_refused(run_cli("plan", "--model", PRESET, "--p-tp", "1", "--d-tp", "1", "--gpu", gpu,
                                  "--attention-backend", backend),
                          f"vLLM does not start a GLM-5-Next engine on --attention-backend {backend}", reason, pick)


def test_a_sparse_backend_does_not_start_a_dense_model():
    assert_refused(run_cli("plan", "--model", "kimi-linear-48b", "--p-tp", "1", "--d-tp", "1",
                              "--attention-backend", "FLASHINFER_MLA_SPARSE_SM90"), "non-sparse not supported")


def test_blhnc_is_the_only_layout():
    model = load_model(PRESET)
    assert resolved_layout(model, None) == "BLHNC"
    assert "valid layouts: ['BLHNC']" in layout_error(model, "LBHNC")


@pytest.mark.parametrize("p_tp, d_tp, local, remote", [(1, 2, 2560, 4608), (2, 1, 4608, 2560), (1, 4, 1536, 4608)])
def test_different_tp_sizes_need_one_block_size_and_plan_says_which(p_tp, d_tp, local, remote):
    p = plan(p_tp, d_tp)
    assert [r.code for r in p.verdict.refusals] == ["block-size"]
    assert f"Local block size {local} is not divisible by remote block size {remote}" in p.verdict.refusals[0].message
    assert p.verdict.suggested_block_size == 4608
    fixed = plan(p_tp, d_tp, block=4608)
    assert fixed.verdict.accepts and fixed.decode.geometry.block_size == fixed.prefill.geometry.block_size == 4608


def test_blocks_that_divide_still_fail_on_the_tail_rings_length():
    # 2P1D at --block-size 2560: P keeps 2560, D needs 5120, so block_size_ratio 2: the latent and
    # the compressed keys scale with it, the 8192-byte tail ring does not (an assert in vLLM).
    p = plan(2, 1, block=2560)
    assert (p.prefill.geometry.block_size, p.decode.geometry.block_size) == (2560, 5120)
    [refusal] = p.verdict.refusals
    assert refusal.code == "mla-block-lens" and "block_size_ratio=2): local=[" in refusal.message
    # vLLM's assert names every region's length: D's ring is 8192 bytes, not twice P's
    local, remote = (p.decode.region_block_lens, p.prefill.region_block_lens)
    assert f"local={list(local)}, remote={list(remote)}." in refusal.message
    assert local[-1] == remote[-1] == 8192 and local[:-11] == tuple(2 * n for n in remote[:-11])


def test_every_page_of_the_row_is_a_region_of_its_own():
    # register_kv_caches on vLLM 0.34: 9 KDA slots (4 groups of up to 9 layers side by side), then
    # the 11 MLA layers' compressed keys (a 4608-token block: 288 keys of 132 bytes), latents and rings.
    p = plan(1, 1)
    page, keys = p.decode.geometry.page_bytes, 4608 // 16 * 132
    assert p.decode.region_block_lens == (page,) * 9 + (keys,) * 11 + (page,) * 11 + (8192,) * 11
    # vLLM 0.33 keys a region by its address alone: the first keys' and ring's pages start the row
    # like the first KDA slot and join its region, which takes the keys' (MLA) length.
    older = glm5next.regions(p.model, p.decode.geometry, 9, keyed_by_length=False)
    assert tuple(r.length for r in older) == (keys,) + (page,) * 8 + (keys,) * 10 + (page,) * 11 + (8192,) * 10
    # the joined region is still the KDA slot's (the first view registered at it)
    assert [r.kind for r in older[:2]] == [STATE] * 2 and older[9].kind == glm5next.KEYS


@pytest.mark.parametrize("release, latent, ring", [
    # vLLM 0.34: 8 regions (2 KDA slots, then keys, latents, rings of layers 3 and 7); the MLA group
    # covers the keys and latents, the ring group the rings (its _group_region_indices)
    ("0.34", [2 * 2048 + 12, 3 * 2048 + 12, 4 * 2048 + 12, 5 * 2048 + 12], [6 * 2048 + 15, 7 * 2048 + 15]),
    # vLLM 0.33: layer 3's keys and ring join the first KDA slot's region (one address), 6 regions;
    # an attention group spans every region, the ring group its scratch regions (0 and the last)
    ("0.33", [r * 2048 + 12 for r in range(6)], [15, 5 * 2048 + 15]),
])
def test_descriptor_ids_number_every_region_as_vllms_worker_does(release, latent, ring):
    """The IDs vLLM's own _compute_desc_ids gave (conformance, an 8-layer GLM-5-Next at TP 1 on both
    sides, D with 2,048 blocks, request '3;6;9;12;15'): SSM IDs after every region's attention
    descriptors (F·N), each attention-kind group over the regions it covers."""
    flags = EngineFlags(num_blocks=2048, release=vllm_release(release))
    p = build_plan(glm(num_hidden_layers=8), 1, 1, PlanOptions(
        semantics="vllm", prefill=replace(flags, num_blocks=4096), decode=flags,
        prefill_blocks="3;6;9;12;15", decode_blocks="3;6;9;12;15"))
    assert p.grouping.groups == ("ssm",) * 3 + ("attention", "ring")
    regions = 8 if release == "0.34" else 6
    [read] = p.descriptors.reads
    ssm = [regions * 2048 + q * 2048 + block for block in (3, 6, 9) for q in range(2 * 4)]
    assert read.local_ids.tolist() == ssm + latent + ring
    assert p.descriptors.decode.regions == regions
    # execute and check move the same pages on mambaxfer's lists: the KDA and latent IDs on the KV-cache
    # tensors, the keys and rings as the indexer's whole pages apart
    [moved] = p.moved_descriptors.reads
    assert len(moved.local_ids) == len(ssm) + 2 and p.moved_descriptors.decode.regions == 0


def test_exact_semantics_number_mambaxfers_own_lists():
    p = plan(1, 1, semantics="exact")
    assert p.moved_descriptors is p.descriptors and not p.descriptors.decode.regions


def test_a_ring_that_does_not_divide_the_block_stops_the_engine():
    [refusal] = glm5next.refusals(load_model(PRESET), 4608, 4608 + 8)
    assert refusal.code == "kpool-ring" and refusal.message.startswith("D: vLLM does not start this engine: the "
                                                                       "kpool tail ring of 16 tokens")


def test_the_indexer_caches_sizes():
    model = load_model(PRESET)
    caches = indexer_caches.caches(model)
    # Glm5NextTailCache: CircularBufferSpec(ring = 16 · next_power_of_2(cdiv(16 + s, 16)), 2 heads of
    # 128 bf16); Glm5NextIndexerCache: 128 fp8 bytes and a 4-byte scale per 16 tokens.
    assert (caches.ring_tokens, caches.ring_slot_bytes, caches.ring_page_bytes) == (16, 2 * 128 * 2, 8192)
    assert (caches.tokens_per_key, caches.key_bytes, caches.key_page_bytes(4608)) == (16, 132, 4608 // 16 * 132)
    assert indexer_caches.caches(replace(model, num_spec=17)).ring_tokens == 16 * 4


@pytest.mark.parametrize("p_tp, d_tp", [(1, 2), (2, 1), (1, 4), (2, 2)])
def test_check_proves_the_indexer_pages(p_tp, d_tp):
    for semantics in ("vllm", "exact"):
        p = plan(p_tp, d_tp, block=4608, semantics=semantics, request_blocks=2)
        found = proof.prove(p)
        # Every D rank: each MLA layer's ring (one block) and compressed keys (two blocks), whole,
        # from its one attention source.
        assert found is not None and not found.damage
        assert found.reads == d_tp * 11 * 3
        assert found.bytes_moved == d_tp * 11 * (8192 + 2 * 4608 // 16 * 132)
        assert check_plan(p).verdict == "pass"


def test_a_misread_indexer_page_is_caught(monkeypatch):
    p = plan(1, 2, block=4608, request_blocks=2)
    real = indexer_caches.key_reads

    def shifted(model, prefill, decode, d_rank, exact):      # one key late: the next key's bytes
        return tuple(replace(r, segments=tuple(replace(s, remote_offset=s.remote_offset + 132)
                                               for s in r.segments))
                     for r in real(model, prefill, decode, d_rank, exact))

    monkeypatch.setattr(indexer_caches, "key_reads", shifted)
    found = proof.prove(p)
    assert {d.region for d in found.damage} == {"ckey"} and len(found.damage) == 2
    assert found.damage[0].first.wants == "ckey key 0 byte 0"
    assert check_plan(p).verdict == "fail"


def test_unequal_blocks_leave_the_indexer_pages_unproved():
    assert proof.unproved(plan(1, 2)).startswith("P's and D's blocks differ (4608 and 2560")


def test_plan_and_inspect_name_the_indexer_pages():
    result = run_cli("plan", "--model", PRESET, "--p-tp", "1", "--d-tp", "2", "--block-size", "4608",
                     "--format", "json")
    doc = json.loads(result.stdout)
    assert doc["vllm"]["accepts"] and doc["model"]["glm5next"]["index_kpool"] == KPOOL
    [warning] = [w for w in doc["warnings"] if w["code"] == "glm5next-indexer"]
    assert warning["message"].startswith(
        "GLM-5-Next indexer: each of the 11 MLA layers also keeps a kpool tail ring (16 tokens, a 8192 B page, one "
        "block per request) and compressed keys (1 per 16 tokens, 38016 B per D block)")
    shown = " ".join(run_cli("inspect", "--model", PRESET, "--tp", "1").stdout.split())
    assert "engine at TP 1: FLASHINFER_MLA_SPARSE_SM90 · block 4608 tokens" in shown
    assert ("GLM-5-Next: kpool tail ring 16 tokens (CircularBufferSpec, page 8192 B), compressed keys 1 per 16 "
            "tokens (38016 B per block)") in shown


@pytest.mark.usefixtures("nixl")
@pytest.mark.parametrize("p_tp, d_tp, semantics", [(1, 2, "vllm"), (2, 1, "exact"), (1, 4, "vllm")])
def test_execute_moves_every_byte_over_nixl(p_tp, d_tp, semantics):
    # --layers 4: three KDA layers and an MLA layer; a request of 2 blocks of 4608 tokens.
    result = run_cli("execute", "--model", PRESET, "--layers", "4", "--p-tp", str(p_tp), "--d-tp", str(d_tp),
                     "--block-size", "4608", "--semantics", semantics, "--device", "cpu", "--format", "json",
                     "--timeout", "90", "--iters", "1")
    assert result.code == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert doc["verified"] and len(doc["decode"]) == d_tp
    for d in doc["decode"]:
        assert d["indexer_descriptors"] == 3 and d["indexer_bytes"] == 8192 + 2 * 4608 // 16 * 132


def serve(tmp_path, tp: int, role: str, extra: str = "") -> str:
    path = tmp_path / "glm"
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps(config()))
    transfer = json.dumps({"kv_connector": "NixlConnector", "kv_role": role})
    return f"VLLM_SSM_CONV_STATE_LAYOUT=DS vllm serve {path} -tp {tp} --kv-transfer-config '{transfer}' {extra}"


def preflight(tmp_path, p_tp, d_tp, *args, extra=""):
    result = run_cli("preflight", "--prefill", serve(tmp_path, p_tp, "kv_producer", extra), "--decode",
                     serve(tmp_path, d_tp, "kv_consumer", extra), "--format", "json", *args)
    assert "Traceback" not in result.stderr
    return result.code, json.loads(result.stdout)


def test_preflight_names_one_block_size_and_its_lines_work(tmp_path):
    code, doc = preflight(tmp_path, 1, 2)
    assert code == 1 and doc["verdict"] == "refused"
    assert doc["vllm"]["refusals"][0]["code"] == "block-size"
    assert doc["engines"]["decode"]["attention_backend"] == "FLASHINFER_MLA_SPARSE_SM90"
    assert doc["engines"]["decode"]["kv_cache_layout"] == "BLHNC"
    changes = {(c["side"], c["flag"], c["new"]) for c in doc["fix"]["changes"]}
    assert changes == {("prefill", "--block-size", "4608"), ("decode", "--block-size", "4608")}
    assert doc["fix"]["verdict_after"] == "works"
    code, doc = preflight(tmp_path, 1, 2, extra="--block-size 4608")
    assert code == 0 and doc["verdict"] == "works", doc["headline"]


def test_preflight_on_blackwell_hashes_the_fp8_its_config_hook_sets(tmp_path):
    code, doc = preflight(tmp_path, 1, 1, "--gpu", "B200")
    assert code == 0, doc["headline"]
    for side in ("prefill", "decode"):
        assert doc["engines"][side]["kv_cache_dtype"] == "fp8"
        assert doc["engines"][side]["attention_backend"] == "FLASHINFER_MLA_SPARSE"


def test_preflight_before_hopper_is_a_start_up_refusal(tmp_path):
    code, doc = preflight(tmp_path, 1, 1, "--gpu", "A100")
    assert code == 1 and doc["headline"].startswith(
        "REFUSED: vLLM 0.34 does not start the prefill engine on A100 (SM 8.0, CUDA 13): the sparse MLA backends "
        "run on")
    assert [r["code"] for r in doc["vllm"]["refusals"]][:2] == ["attention-backend", "attention-backend"]


def test_preflight_reads_the_lines_attention_backend(tmp_path):
    """A line naming vLLM's pick is the line without it; one naming a dense MLA backend does not start."""
    code, doc = preflight(tmp_path, 1, 1, extra="--attention-backend FLASHINFER_MLA_SPARSE_SM90")
    assert code == 0 and doc["verdict"] == "works"
    code, doc = preflight(tmp_path, 1, 1, extra="--attention-backend FLASHMLA")
    assert code == 1 and doc["headline"].startswith(
        "REFUSED: vLLM 0.34 does not start the prefill engine on --attention-backend FLASHMLA: \"Selected backend "
        "FLASHMLA is not valid")
    assert [r["code"] for r in doc["vllm"]["refusals"]][:2] == ["attention-backend", "attention-backend"]
