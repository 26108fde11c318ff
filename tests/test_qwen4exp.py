"""Qwen4Exp (vLLM's models/qwen4_exp): its config read as vLLM's transformers config reads it,
its PLE state and QSA caches, and what vLLM's NIXL connector refuses of a pairing."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from mambaxfer_cli.engines.vllm.families import qwen4exp
from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.engines.vllm.gpu import gpu
from mambaxfer_cli.engines.vllm.plan import PlanOptions, build_plan
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.readers.model_config import spec_from_config

FIXTURE = Path(__file__).parent / "fixtures" / "hf-configs" / "Qwen__Qwen3.8-Flash-Next.partial.json"
CONFIG = json.loads(FIXTURE.read_text())


def model(**text):
    config = copy.deepcopy(CONFIG)
    config["text_config"].update(text)
    return spec_from_config(config, name="qwen3.8-flash-next", source=str(FIXTURE))


def plan(spec, p_tp, d_tp, p_block=None, d_block=None, layout=None):
    p = EngineFlags(num_blocks=4096, block_size=p_block)
    d = EngineFlags(num_blocks=4096, block_size=d_block)
    return build_plan(spec, p_tp, d_tp, PlanOptions(prefill=p, decode=d, kv_cache_layout=layout))


def codes(p):
    return [r.code for r in p.verdict.refusals]


def test_the_released_config_reads_as_gdn_with_ple_and_qsa():
    spec = model()
    assert spec.family == "Qwen4Exp" and spec.variant == "gdn"
    # transformers reads the checkpoint's full_attention as indexed_attention: 36 GDN + 12 QSA.
    assert (spec.ssm_layers, spec.attention_layers) == (36, 12)
    assert spec.ssm_dtype == "float32"          # Qwen4Exp's class reads mamba_ssm_dtype
    q = spec.ple_qsa
    assert q is not None and q.ple_layers == (1,) and q.ple_channels == 4 * 2560
    assert q.ple_state_len == (4 - 1) * 3 and q.indexer_head_dim == 128 and q.compress_ratio == 4
    # short_conv_state_shape(tp_world_size=1, 10240, 10, 0): 10240 x 9 bf16, whatever the TP.
    assert qwen4exp.ple_state_bytes(spec) == 10240 * 9 * 2
    assert qwen4exp.ple_state_bytes(model(num_speculative_tokens=1)) == 10240 * 10 * 2
    assert qwen4exp.ring_tokens(spec) == 4 and qwen4exp.ring_tokens(model(num_speculative_tokens=1)) == 8


@pytest.mark.parametrize("kind", ["indexed_attention", "qwen_sparse_attention"])
def test_indexed_attention_is_an_attention_layer(kind):
    types = ["linear_attention", "linear_attention", "linear_attention", kind] * 12
    assert model(layer_types=types).attention_layers == 12


@pytest.mark.parametrize("text, words", [
    ({"ple_layer_ids": [4]}, "only supported on linear_attention layers"),
    ({"ple_layer_ids": [49]}, "one-indexed layers in [1, 48]"),
    ({"indexer_kv_heads": 2}, "indexer_kv_heads = 1"),
    ({"indexer_budget": None}, "missing indexer_budget"),
])
def test_configs_transformers_refuses_are_refused(text, words):
    with pytest.raises(UserError, match=words.replace("[", r"\[").replace("]", r"\]")):
        model(**text)


@pytest.mark.parametrize("p_tp, d_tp", [(1, 2), (2, 1), (1, 4), (4, 1)])
def test_pairings_across_the_kv_head_boundary_are_refused_first(p_tp, d_tp):
    # _validate_csa_linear_tp_layout: 2 KV heads, so TP 1 and TP >= 2 lay pages out differently.
    p = plan(model(), p_tp, d_tp)
    assert codes(p)[0] == "csa-linear-tp"
    assert p.verdict.refusals[0].message == (
        "CSA-linear NIXL requires both endpoints on the same side of the KV-head sharding boundary "
        f"(2 KV heads): got local TP {d_tp}, remote TP {p_tp}.")


def test_same_side_of_the_boundary_is_not_refused_for_it():
    # 4 KV heads: TP 1 and 2 both hold several heads per page.
    spec = model(num_key_value_heads=4)
    assert "csa-linear-tp" not in codes(plan(spec, 1, 2)) and "csa-linear-tp" not in codes(plan(spec, 2, 1))
    assert codes(plan(spec, 1, 4))[0] == "csa-linear-tp"


def test_ple_pages_must_be_equal_and_the_fix_gives_equal_pages():
    # P TP 2 and D TP 4 each hold one KV head, but vLLM fits each side's block to its own GDN
    # state (1600 and 832 tokens), so the padded PLE pages differ: _build_mamba_remote refuses.
    p = plan(model(), 2, 4)
    assert "ple-geometry" in codes(p)
    assert p.verdict.refusals[-1].message == (
        "PLE pages require identical P/D geometry: local=851968, remote=1638400.")
    # Equal blocks alone are not enough: QSA's default layout (BLNHC) cannot split heads.
    assert codes(plan(model(), 2, 4, 1600, 1600)) == ["kv-cache-layout-heads"]
    fixed = plan(model(), 2, 4, 1600, 1600, layout="BLHNC")
    assert fixed.verdict.accepts
    assert qwen4exp.ple_page_bytes(fixed.model, fixed.prefill) == qwen4exp.ple_page_bytes(fixed.model, fixed.decode)
    assert any("--block-size 1600 on P and 1600 on D" in w.message for w in p.warnings)


SMALL_GDN = dict(linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16)


@pytest.mark.parametrize("heads, refused", [(8, False), (2, True)])
def test_num_spec_on_one_side_only(heads, refused):
    # D speculates (MTP): its PLE state has one more row (204800 B against 184320 B). With 8 KV
    # heads both pages pad to the same attention page (64 tokens x 4096 B): vLLM compares the
    # padded pages, accepts, and D reads P's page whole onto its own rows. With 2 heads (1 per
    # rank) the pages follow the states and differ: refused.
    spec = model(num_key_value_heads=heads, **SMALL_GDN)
    draft = model(num_key_value_heads=heads, num_speculative_tokens=1, **SMALL_GDN)
    options = PlanOptions(semantics="vllm", prefill=EngineFlags(num_blocks=4096),
                          decode=EngineFlags(num_blocks=4096), prefill_model=spec)
    p = build_plan(draft, 2, 2, options)
    assert ("ple-geometry" in codes(p)) is refused
    assert any(w.code == "vllm-ple-differs" for w in p.warnings) is not refused


def test_ple_without_qsa_is_refused_at_worker_start():
    spec = model(indexer_n_heads=None, indexer_kv_heads=None, indexer_head_dim=None, indexer_budget=None,
                 indexer_compress_ratio=None)
    assert not spec.ple_qsa.has_qsa
    assert codes(plan(spec, 2, 2)) == ["ple-without-qsa"]


def test_the_mamba_page_is_the_largest_of_gdn_and_ple():
    # Tiny GDN state: the PLE page (184320 B) sets the block the attention page must reach.
    spec = model(**SMALL_GDN)
    p = plan(spec, 2, 2)
    assert p.prefill.geometry.state_bytes == 184320
    assert p.prefill.geometry.page_bytes >= 184320


# --- the PLE pages, byte by byte -----------------------------------------------------------------

from mambaxfer_cli.engines.vllm.families import qwen4exp_proof as ple_proof  # noqa: E402
from mambaxfer_cli.engines.vllm.proof.check import check_plan  # noqa: E402


@pytest.mark.parametrize("p_tp, d_tp, semantics, reads", [
    (2, 2, "exact", 2), (2, 2, "vllm", 2), (4, 8, "vllm", 8), (8, 4, "vllm", 8), (8, 4, "exact", 4)])
def test_every_d_rank_gets_the_whole_ple_state(p_tp, d_tp, semantics, reads):
    # 832-token blocks on both sides: the same attention page at TP 4 and 8 (one KV head per rank).
    engine = EngineFlags(num_blocks=4096, block_size=832)
    p = build_plan(model(), p_tp, d_tp, PlanOptions(semantics=semantics, prefill=engine, decode=engine))
    assert p.verdict.accepts
    proof = ple_proof.prove_ple(p)
    assert proof is not None and not proof.damage
    # vLLM reads the page from every SSM source rank (P > D: each D rank has P/D of them).
    assert proof.reads == reads
    assert proof.bytes_verified == d_tp * 10240 * 9 * 2
    assert check_plan(p).simulation.bytes_verified >= proof.bytes_verified


def test_a_ple_read_that_never_lands_is_caught(monkeypatch):
    p = plan(model(), 2, 2)
    monkeypatch.setattr(ple_proof.qwen4exp, "ple_sources", lambda prefill, decode, d: [] if d == 1 else [d])
    result = check_plan(p)
    assert result.verdict == "fail"
    damage = result.simulation.damage
    assert [(d.d_rank, d.region) for d in damage] == [(1, "ple")]
    # Every byte but those whose pattern happens to equal the poison (about 1 in 256).
    assert damage[0].first.reason == "never written" and 0.99 < damage[0].wrong_bytes / (10240 * 9 * 2) < 1


def test_num_spec_on_one_side_corrupts_the_ple_state_under_vllm():
    # The padded pages agree (8 KV heads), vLLM copies P's 9-row page onto D's 10-row layout.
    spec = model(num_key_value_heads=8, **SMALL_GDN)
    draft = model(num_key_value_heads=8, num_speculative_tokens=1, **SMALL_GDN)
    options = PlanOptions(semantics="vllm", prefill=EngineFlags(num_blocks=4096),
                          decode=EngineFlags(num_blocks=4096), prefill_model=spec)
    p = build_plan(draft, 2, 2, options)
    proof = ple_proof.prove_ple(p, spec)
    assert proof is not None and proof.damage
    first = proof.damage[0].first
    # Channel 0's 9 rows land right; channel 1 starts 2 bytes (one bf16 row) early on P.
    assert first.wants.startswith("ple channel 1 row 0") and first.source.holds.startswith("ple channel 1 row 1")


# --- the commands ----------------------------------------------------------------------------------

from cli_run import assert_refused, assert_user_error, run_cli  # noqa: E402

SERVE = ("VLLM_SSM_CONV_STATE_LAYOUT=DS vllm serve Qwen/Qwen3.8-Flash-Next -tp {tp} --kv-transfer-config "
         "'{{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_{role}\"}}'")


@pytest.mark.parametrize("p_tp, d_tp, first", [(1, 2, "csa-linear-tp"), (2, 4, "block-size")])
def test_preflight_reads_the_preset_and_names_vllms_first_refusal(p_tp, d_tp, first):
    result = run_cli("preflight", "--prefill", SERVE.format(tp=p_tp, role="producer"),
                     "--decode", SERVE.format(tp=d_tp, role="consumer"), "--format", "json")
    assert result.code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "refused"
    codes_ = [r["code"] for r in doc["vllm"]["refusals"]]
    assert codes_[0] == first
    if first == "block-size":
        # --block-size 400 on both: each side raises it to 1600 tokens, the same PLE page.
        assert "ple-geometry" in codes_
        assert doc["fix"]["verdict_after"] == "works"


def test_check_proves_the_preset_and_plan_names_what_it_leaves_out():
    result = run_cli("check", "--model", "qwen3.8-flash-next", "--pairs", "2:2,1:2", "--format", "json")
    assert result.code == 1     # 1:2 refused by vLLM
    doc = json.loads(result.stdout)
    same, cross = doc["results"]
    assert same["verdict"] == "pass" and same["bytes_verified"] > 2 * 10240 * 9 * 2
    assert cross["vllm"]["refusals"][0]["code"] == "csa-linear-tp"
    plan_doc = json.loads(run_cli("plan", "--model", "qwen3.8-flash-next", "--p-tp", "2", "--d-tp", "2",
                                  "--format", "json").stdout)
    assert plan_doc["model"]["qwen4exp"]["ple_layers"] == [1]
    assert {w["code"] for w in plan_doc["warnings"]} == {"qwen4exp-ple", "qwen4exp-qsa"}


# --- rings, the schema, inspect ---------------------------------------------------------------------

from mambaxfer_cli.engines.vllm import circular_buffer  # noqa: E402


@pytest.mark.parametrize("ratio, spec, tokens", [(4, 0, 4), (4, 1, 8), (4, 4, 8), (4, 5, 12)])
def test_the_qsa_ring_rounds_up_to_whole_groups(ratio, spec, tokens):
    assert circular_buffer.qsa_ring_tokens(ratio, spec) == tokens


@pytest.mark.parametrize("kpool, spec, tokens", [(16, 0, 16), (16, 1, 32), (16, 16, 32), (16, 17, 64)])
def test_glm5next_tail_ring_takes_a_power_of_two_of_pools(kpool, spec, tokens):
    # Glm5NextTailCache.get_kv_cache_spec: kpool * next_power_of_2(cdiv(kpool + num_spec, kpool)).
    assert circular_buffer.kpool_ring_tokens(kpool, spec) == tokens
    assert circular_buffer.kpool_slot_bytes(128) == 2 * 128 * 2


def test_a_ring_that_does_not_divide_the_block_stops_the_engine():
    # num_spec 5: a 12-token ring (round_up(4 + 5, 4)); vLLM's 1600-token block is no multiple.
    spec = model(num_speculative_tokens=5)
    refused = plan(spec, 2, 2)
    assert codes(refused)[0] == "qsa-ring"
    assert "ring of 12 tokens does not divide the attention block" in refused.verdict.refusals[0].message
    # 1728 tokens: a multiple of 12, of FLASH_ATTN's 16 and of the GDN checkpoint alignment 64.
    assert "qsa-ring" not in codes(plan(spec, 2, 2, 1728, 1728))


@pytest.mark.parametrize("backend, device, kv", [("FLASHINFER", "H100", "auto"), (None, "B200", "auto"),
                                                  ("FLASHINFER", "H100", "fp8"), ("TRITON_ATTN", "H100", "auto")])
def test_qsa_layers_run_their_own_backend_and_never_split_the_block(backend, device, kv):
    """Qwen4ExpQSAAttention runs Qwen4ExpQSABackend whatever --attention-backend says: its
    MultipleOf(16) takes the whole block (select_common_block_size), so FLASHINFER's 64-token kernel
    blocks never split a QSA engine's block (whose ring view register_kv_caches would refuse)."""
    flags = EngineFlags(num_blocks=4096, attention_backend=backend, gpu=gpu(device), kv_cache_dtype=kv)
    g = build_plan(model(), 1, 1, PlanOptions(prefill=flags, decode=flags)).decode.geometry
    assert (g.attention_backend, g.kernel_block_size, g.blocks_per_logical) == \
        ("QWEN4_EXP_QSA_TRITON", g.block_size, 1), g


def test_the_plan_document_of_the_preset_fits_its_schema():
    import jsonschema

    from mambaxfer_cli.schema import document_schema

    doc = json.loads(run_cli("plan", "--model", "qwen3.8-flash-next", "--p-tp", "2", "--d-tp", "2",
                             "--format", "json").stdout)
    jsonschema.Draft202012Validator(document_schema("plan")).validate(doc)
    assert doc["model"]["qwen4exp"] == {"ple_layers": [1], "ple_channels": 10240, "ple_state_len": 9,
                                        "indexer_head_dim": 128, "compress_ratio": 4, "rope_positions": True,
                                        "indexer_kv_dtype": "bf16"}


def test_inspect_names_the_ple_page_and_the_ring():
    out = run_cli("inspect", "--model", "qwen3.8-flash-next", "--tp", "2,4").stdout
    assert "Qwen4Exp: PLE state 184320 B on every rank (1 layer(s), TP-replicated), page 1638400 B" in out
    assert "page 851968 B" in out and "QSA raw-key ring 4 tokens" in out


@pytest.mark.parametrize("p_tp, d_tp, refused", [
    (2, 4, True),     # P holds one KV head per rank (TP 2 = 2 heads): D splits P's heads
    (4, 2, False),    # P replicates the heads (TP 4 > 2): nothing is split
    (4, 8, False),
    (2, 2, False),    # the same TP: no split
])
def test_heterogeneous_tp_needs_qsas_block_contiguous_layout(p_tp, d_tp, refused):
    # QSA's indexer backend allows BLNHC and BLHNC only; the engine runs BLNHC (the NIXL connector's
    # LBHNC is dropped), and _validate_remote_agent_handshake refuses a head split in it.
    p = plan(model(), p_tp, d_tp)
    assert ("kv-cache-layout-heads" in codes(p)) is refused
    assert (p.verdict.suggested_layout == "BLHNC") is refused
    assert "kv-cache-layout-heads" not in codes(plan(model(), p_tp, d_tp, layout="BLHNC"))
    if refused:
        # vLLM's order: the block sizes, then the layout, then the PLE pages (_build_mamba_remote).
        assert codes(p) == ["block-size", "kv-cache-layout-heads", "ple-geometry"]
        assert "VLLM_KV_CACHE_LAYOUT=BLHNC and --block-size" in p.verdict.fix_words()


# --- the QSA caches, proved byte by byte ---------------------------------------------------------

from mambaxfer_cli.engines.vllm import indexer_caches  # noqa: E402
from mambaxfer_cli.engines.vllm.proof import indexer_caches as proof_qsa  # noqa: E402

GDN8 = dict(linear_num_value_heads=8, linear_num_key_heads=8, linear_key_head_dim=16, linear_value_head_dim=16)


def qsa_plan(spec, p_tp, d_tp, semantics="vllm", block=256, blocks=3):
    flags = EngineFlags(num_blocks=4096, block_size=block)
    return build_plan(spec, p_tp, d_tp, PlanOptions(semantics=semantics, prefill=flags, decode=flags,
                                                    kv_cache_layout="BLHNC", request_blocks=blocks))


def test_the_qsa_pages_of_the_released_config():
    spec = model()
    # M-RoPE (rope_parameters.mrope_section): each ring slot is the 128-wide key, then 3 int64
    # positions as 12 bf16 slots (QSARawKeyCache): 140 x 2 B, 4 slots.
    assert spec.ple_qsa.rope_positions and indexer_caches.caches(spec).ring_page_bytes == 4 * 140 * 2
    assert not model(rope_parameters={"rope_type": "default", "rope_theta": 1e7}).ple_qsa.rope_positions
    # One 128-wide bf16 key per 4 tokens of the attention block.
    assert indexer_caches.caches(spec).key_page_bytes(1600) == 400 * 128 * 2


@pytest.mark.parametrize("p_tp, d_tp", [(1, 1), (2, 2), (4, 8), (8, 4)])
def test_every_qsa_byte_lands_where_vllm_accepts(p_tp, d_tp):
    spec = model(num_key_value_heads=2, ple_layer_ids=[], **GDN8)
    p = qsa_plan(spec, p_tp, d_tp)
    assert p.verdict.accepts
    proof = proof_qsa.prove(p)
    ring, ckey = indexer_caches.caches(spec).ring_page_bytes, indexer_caches.caches(spec).key_page_bytes(256)
    # Every D rank: each layer's ring (one block) and its compressed keys of the request's 3 blocks.
    assert proof.bytes_verified == d_tp * 12 * (ring + 3 * ckey)
    assert not proof.damage
    assert not any(w.code == "vllm-qsa-ring" for w in p.warnings)


@pytest.mark.parametrize("p_tp, d_tp, ranks, said", [
    (2, 4, [1, 3], "past the page"),      # D reads its head offset's page: the next layer's ring
    (4, 2, [0, 1], "copies"),             # each of 2 sources gives its first half into its slot
])
def test_vllm_reads_the_ring_as_head_sharded_below_the_kv_heads(p_tp, d_tp, ranks, said):
    # 8 KV heads, both TP sizes below them, BLHNC (the layout that lets the heads split): vLLM
    # flags the ring SPLIT and reads a TP-invariant page as a head slice. The compressed keys
    # (an MLA spec, REPLICATE) land right.
    spec = model(num_key_value_heads=8, ple_layer_ids=[], **GDN8)
    p = qsa_plan(spec, p_tp, d_tp)
    assert p.verdict.accepts
    proof = proof_qsa.prove(p)
    assert sorted(d.d_rank for d in proof.damage) == ranks
    assert {d.space for d in proof.damage} == {"ring"}
    assert all(d.pages == 12 for d in proof.damage)
    warning = next(w for w in p.warnings if w.code == "vllm-qsa-ring")
    assert said in warning.message
    # mambaxfer's own reads (the whole page from one source) are right.
    assert not proof_qsa.prove(qsa_plan(spec, p_tp, d_tp, semantics="exact")).damage


def test_check_counts_the_qsa_pages_and_names_a_wrong_ring():
    from mambaxfer_cli.engines.vllm.proof.check import check_plan
    spec = model(num_key_value_heads=8, ple_layer_ids=[], **GDN8)
    result = check_plan(qsa_plan(spec, 2, 4))
    assert result.verdict == "fail"
    first = result.simulation.first_wrong
    assert first.space == "ring" and "indexer ring layer 7" in first.describe()
    right = check_plan(qsa_plan(spec, 2, 2))
    assert right.verdict == "pass"


def test_qsa_pages_are_not_proved_across_block_sizes_nor_where_vllm_moves_none():
    assert proof_qsa.unproved(plan(model(), 2, 4)).startswith("P's and D's blocks differ (1600 and 832")
    assert proof_qsa.unproved(plan(model(), 1, 2)) == ""       # csa-linear-tp: nothing moves
    assert proof_qsa.unproved(plan(model(), 2, 2)) is None


def test_plan_takes_the_layout_and_the_fix_it_names_is_accepted():
    refused = run_cli("plan", "--model", "qwen3.8-flash-next", "--p-tp", "2", "--d-tp", "4", env={"COLUMNS": "80"})
    assert "fix: VLLM_KV_CACHE_LAYOUT=BLHNC and --block-size 400 on both engines" in refused.stdout
    fixed = run_cli("plan", "--model", "qwen3.8-flash-next", "--p-tp", "2", "--d-tp", "4", "--kv-cache-layout",
                    "BLHNC", "--block-size", "400", "--format", "json")
    doc = json.loads(fixed.stdout)
    assert doc["vllm"]["accepts"] and doc["vllm"]["suggested_kv_cache_layout"] is None


@pytest.mark.parametrize("layout, words, code", [
    ("LBHNC", "vLLM does not start an engine of qwen3.8-flash-next: VLLM_KV_CACHE_LAYOUT=LBHNC does not satisfy "
              "every supported set; valid layouts: ['BLNHC', 'BLHNC'].", 1),
    ("LBHCN", "'LBHCN' is not one of", 2),
])
def test_a_layout_vllm_does_not_run_is_one_line_and_exit_1(layout, words, code):
    # a layout vLLM does not start is its verdict (1); a name that is no layout, a usage error (2)
    result = run_cli("plan", "--model", "qwen3.8-flash-next", "--p-tp", "2", "--d-tp", "2", "--kv-cache-layout",
                     layout)
    (assert_refused if code == 1 else assert_user_error)(result, words)


def test_other_models_split_heads_only_in_a_block_contiguous_layout():
    # Granite-4.0-H-Tiny, 4 KV heads: P TP 1 holds them all, D TP 2 splits them; LBNHC keeps a block's
    # heads apart, so vLLM refuses, and the fix is the connector's own LBHNC.
    options = ("--model", "granite-4.0-h-tiny", "--p-tp", "1", "--d-tp", "2", "--format", "json")
    doc = json.loads(run_cli("plan", *options, "--kv-cache-layout", "LBNHC").stdout)
    assert [r["code"] for r in doc["vllm"]["refusals"]][-1] == "kv-cache-layout-heads"
    assert doc["vllm"]["suggested_kv_cache_layout"] == "LBHNC"
    doc = json.loads(run_cli("plan", *options).stdout)
    assert "kv-cache-layout-heads" not in [r["code"] for r in doc["vllm"]["refusals"]]


# --- --attention-config indexer_kv_dtype: the compressed keys' dtype --------------------------------

def test_fp8_compressed_keys_are_one_byte_an_element():
    # QSAIndexer.__init__: indexer_kv_dtype fp8 keeps the compressed keys in plain float8_e4m3fn, no
    # scales; "auto" is bf16. The ring stays bf16.
    bf16, fp8 = model(), spec_from_config(copy.deepcopy(CONFIG), name="q", source="t", indexer_kv_dtype="fp8")
    assert fp8.ple_qsa.indexer_kv_dtype == "fp8" and bf16.ple_qsa.indexer_kv_dtype == "bf16"
    assert indexer_caches.caches(fp8).key_page_bytes(1600) == 400 * 128
    assert indexer_caches.caches(fp8).ring_page_bytes == indexer_caches.caches(bf16).ring_page_bytes
    result = run_cli("check", "--model", "qwen3.8-flash-next", "--pairs", "2:2", "--indexer-kv-dtype", "fp8")
    assert result.code == 0, result.stdout + result.stderr


@pytest.mark.parametrize("value, words, code", [
    ("nvfp4", "indexer_kv_dtype='nvfp4' is not supported by the Qwen4Exp QSA indexer (only 'bf16' or 'fp8')", 1),
    ("fp16", "indexer_kv_dtype must be one of auto, bf16, fp8, mxfp4, nvfp4", 2),
])
def test_indexer_kv_dtypes_vllm_refuses_are_one_line(value, words, code):
    # a value vLLM's option takes but its indexer does not run: a refusal (1); one it does not take: 2
    result = run_cli("plan", "--model", "qwen3.8-flash-next", "--p-tp", "2", "--d-tp", "2", "--indexer-kv-dtype",
                     value)
    (assert_refused if code == 1 else assert_user_error)(result, words)


def test_the_core_takes_the_engine_s_indexer_kv_dtype_and_vllm_s_rule_refuses():
    # vLLM's option values and refusal are its own (Startup.dtypes); the core keeps the value an engine settles
    from mambaxfer_cli.engines.vllm.dtypes import DTYPES
    from mambaxfer_cli.errors import Refused
    from mambaxfer_cli.readers.model_config import Startup

    assert spec_from_config(copy.deepcopy(CONFIG), name="q", source="t", indexer_kv_dtype="mxfp4", startup=Startup()) \
        .ple_qsa.indexer_kv_dtype == "mxfp4"
    with pytest.raises(Refused, match="vLLM does not start a Qwen4Exp engine with it"):
        spec_from_config(copy.deepcopy(CONFIG), name="q", source="t", indexer_kv_dtype="mxfp4", startup=DTYPES)
    assert spec_from_config(copy.deepcopy(CONFIG), name="q", source="t", indexer_kv_dtype=" BF16", startup=DTYPES) \
        .ple_qsa.indexer_kv_dtype == "bf16"


def test_the_flag_on_a_model_without_qsa_says_so():
    assert_user_error(run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--indexer-kv-dtype",
                              "fp8"), "--indexer-kv-dtype: jamba has no QSA indexer")


def test_keys_in_different_dtypes_are_accepted_by_vllm_and_preflight_says_corrupt():
    # The compatibility hash does not take the attention config, and a hybrid without MLA gets no
    # region-length check: vLLM accepts, D reads P's fp8 key pages as bf16 ones.
    layout = "VLLM_KV_CACHE_LAYOUT=BLHNC " + SERVE + " --block-size 1600"
    fp8 = " --attention-config '{{\"indexer_kv_dtype\":\"fp8\"}}'"
    result = run_cli("preflight", "--prefill", (layout + fp8).format(tp=2, role="producer"),
                     "--decode", layout.format(tp=2, role="consumer"), "--format", "json")
    assert result.code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "corrupt" and doc["vllm"]["accepts"]
    assert doc["headline"].startswith("CORRUPT: P keeps its QSA compressed keys in fp8, D in bf16")
    assert "vllm-indexer-key-dtype" in [w["code"] for w in doc["plan_warnings"]]
    same = run_cli("preflight", "--prefill", (layout + fp8).format(tp=2, role="producer"),
                   "--decode", (layout + fp8).format(tp=2, role="consumer"), "--format", "json")
    assert same.code == 0 and json.loads(same.stdout)["verdict"] == "works", same.stdout[-800:]


MTP = '{"method":"mtp","num_speculative_tokens":1}'


@pytest.mark.parametrize("release,speculative,regions", [
    ("0.34", None, 48), ("0.33", None, 46), ("0.34", MTP, 51), ("0.33", MTP, 49)])
def test_vllm_numbers_the_qsa_rings_keys_and_ple_state(release, speculative, regions):
    """register_kv_caches makes each QSA ring, compressed-key and attention view a region (0.33
    joins the first ring and keys to slot 0) and _compute_desc_ids numbers the ring and PLE groups:
    SSM IDs from F·N, the PLE ID after the S·k SSM ones, the rings over their regions (conformance
    compares the numbers with vLLM's own; before, F was the 12 tensors and neither group had IDs)."""
    blocks = "33936;33943;33950;33957;33964;33971"
    args = ["plan", "--model", "qwen3.8-flash-next", "--p-tp", "1", "--d-tp", "1", "--semantics", "vllm",
            "--vllm-version", release, "--decode-blocks", blocks, "--format", "json"]
    args += ["--speculative-config", speculative] if speculative else []
    doc = json.loads(run_cli(*args).stdout)
    d = doc["descriptors"]
    assert d["groups"] == ["ssm", "ssm", "ssm", "ple", "ring", "attention"]
    assert d["decode"]["regions"] == regions
    n, ssm, ple, ring = d["decode"]["num_blocks"], 33936, 33957, 33964
    rings = d["group_regions"][4]
    ids = d["reads"][0]["local_ids"]
    assert ids[0] == regions * n + ssm and ids[3 * 48] == regions * n + 12 * 4 * n + ple
    assert ids[3 * 48 + 1:3 * 48 + 1 + len(rings)] == [r * n + ring for r in rings]
    assert len(rings) == (13 if speculative else 12) and (rings[0] == 0) == (release == "0.33")
