"""Qwen4Exp and AliceAI under --engine sglang, as SGLang 0.5.23's code has them.

Qwen4Exp (``models/qwen4_exp.py``, ``Qwen4ExpForConditionalGeneration``): its GDN state is
Qwen3-Next's (``Qwen4ExpTextConfig`` subclasses ``Qwen3NextConfig``); its ``MambaPool`` carries the PLE
side states after the GDN entries (``mem_cache/ple_state_pool.py``): per PLE layer a
``(hidden_size · hc_count, (ple_conv_kernel_size - 1) · ngram_size)`` window in the conv dtype
(``short_conv_state_shape``), then one ``ngram_size - 1`` int64 context with layer id ``2**32 - 1``
(``PLE_NGRAM_STATE_LAYER_ID``), both replicated across attention TP (slice axis None, dim 0). NIXL
refuses replicated state across TP sizes (the MAMBA branch of its state send loop) and, before any
PLE layer, the QSA indexer's state (its QSA_PENDING branch); Mooncake moves them whole from the
elected writers (``should_send_replicated_state``). AliceAI: no file of SGLang 0.5.23 names it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jsonschema

from cli_run import assert_refused, run_cli
from mambaxfer_cli.engines.sglang.plan import plan
from mambaxfer_cli.engines.sglang.proof import replicated_wrong
from mambaxfer_cli.engines.sglang.verdict import verdict
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.schema import document_schema

PRESET = "qwen3.8-flash-next"
FIXTURE = Path(__file__).parent / "fixtures" / "hf-configs" / "Qwen__Qwen3.8-Flash-Next.partial.json"
# Its config: hidden_size 2560, hc_count 4, ple_conv_kernel_size 4, ngram_size 3, ple_layer_ids [2].
WINDOW = 2560 * 4 * (4 - 1) * 3 * 2          # bf16 (SGLANG_MAMBA_CONV_DTYPE's default)
NGRAM_ID = 2**32 - 1


def side(document: dict) -> list[tuple]:
    return [(e["field"], e["layer_id"], e["item_len"], e["dim"]) for e in document["entries"]["decode"]
            if e["field"].startswith("ple")]


def test_qwen4exp_entries_are_sglangs_with_the_ple_states_after_the_gdn_ones():
    result = run_cli("plan", "--engine", "sglang", "--model", PRESET, "--p-tp", "2", "--d-tp", "1",
                     "--transfer-backend", "mooncake", "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    jsonschema.validate(document, document_schema("sglang-plan"))
    assert side(document) == [("ple_short_conv", 1, WINDOW, 0), ("ple_ngram", NGRAM_ID, 16, 0)]
    fields = [e["field"] for e in document["entries"]["prefill"]]
    assert fields == (["conv"] * 36 + ["temporal"] * 36 + ["ple_short_conv", "ple_ngram"] + ["qsa_pending"] * 12
                      + ["qsa_rope"] + ["qsa_compressed"] * 12)
    # Aggregation: only the first P rank of the group writes the replicated items, whole.
    assert [(w["field"], w["p_rank"], w["src"], w["dst"], w["length"]) for w in document["writes"]
            if w["field"].startswith("ple")] == [("ple_short_conv", 0, 0, 0, WINDOW), ("ple_ngram", 0, 0, 0, 16)]
    assert document["verdict"]["right"]


def test_nixl_refuses_the_replicated_ple_state_across_tp_sizes_and_moves_it_at_equal_ones():
    model = load_model(PRESET)
    refused = verdict(model, 1, 2, backend="nixl")
    assert refused.refusal == ("Replicated Mamba PD state transfer currently requires matching prefill/decode "
                               "attention TP sizes")
    assert verdict(model, 2, 2, backend="nixl").right and verdict(model, 1, 2, backend="mooncake").right
    # Without PLE layers the QSA indexer's state is the first NIXL refuses.
    no_ple = replace(model, ple_qsa=replace(model.ple_qsa, ple_layers=()))
    assert verdict(no_ple, 1, 2, backend="nixl").refusal == (
        "PD Disaggregation does NOT support PD different TP sizes for non-MLA QSA_PENDING hybrid models yet.")
    assert {e.field for e in plan(no_ple, 1, 1).prefill_entries if e.replicated} == {
        "qsa_pending", "qsa_rope", "qsa_compressed"}


def test_check_refuses_over_nixl_and_proves_the_rest():
    result = run_cli("check", "--engine", "sglang", "--model", PRESET, "--max-tp", "2", "--transfer-backend",
                     "nixl", "--format", "json")
    assert result.code == 1, result.stderr
    outcomes = {(p["p_tp"], p["d_tp"]): p["outcome"] for p in json.loads(result.stdout)["pairings"]}
    assert outcomes == {(1, 1): "right", (2, 2): "right", (1, 2): "refused", (2, 1): "refused"}


# Its QSA indexer: indexer_kv_heads 1, indexer_head_dim 128, indexer_compress_ratio 4, on the full
# attention layers 3, 7, ..., 47; SGLang sets the page to 64 tokens (model_overrides/qwen4_exp.py).
QSA_LAYERS = list(range(3, 48, 4))
RING, ROPE, PAGE = 4 * 128 * 2, 4 * 3 * 8, 64 // 4 * 128 * 2     # bf16 key ring, int64 positions, bf16 keys
ROPE_ID = 2**32 - 2


def qsa(document: dict, side: str = "decode") -> list[tuple]:
    return [(e["field"], e["layer_id"], e["item_len"]) for e in document["entries"][side]
            if e["field"].startswith("qsa")]


def test_the_qsa_states_are_sglangs_entries_moved_whole_from_the_elected_writers():
    """QSATokenToKVPool's QSA_PENDING list (each full-attention layer's key ring, then the RoPE ring
    with QSA_ROPE_STATE_LAYER_ID) and QSA_COMPRESSED list (a compressed page per full-attention
    layer), as get_qsa_pending_state_buf_infos and get_qsa_compressed_state_buf_infos give them;
    Mooncake's aggregation sends each from the first P rank of the group only (should_send_replicated_state)."""
    result = run_cli("plan", "--engine", "sglang", "--model", PRESET, "--p-tp", "4", "--d-tp", "2",
                     "--transfer-backend", "mooncake", "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    jsonschema.validate(document, document_schema("sglang-plan"))
    want = ([("qsa_pending", i, RING) for i in QSA_LAYERS] + [("qsa_rope", ROPE_ID, ROPE)]
            + [("qsa_compressed", i, PAGE) for i in QSA_LAYERS])
    assert qsa(document, "prefill") == qsa(document) == want
    assert all(e["dim"] == 0 for e in document["entries"]["decode"] if e["field"].startswith("qsa"))
    writes = {(w["field"], w["d_rank"], w["p_rank"], w["src"], w["dst"], w["length"]) for w in document["writes"]
              if w["field"].startswith("qsa")}
    assert writes == {(f, d, 2 * d, 0, 0, n) for f, n in (("qsa_pending", RING), ("qsa_rope", ROPE),
                                                          ("qsa_compressed", PAGE)) for d in (0, 1)}
    assert document["verdict"]["right"] and "not_modelled" not in document["verdict"]
    # One descriptor per write and entry: 25 QSA entries, one elected writer into each of 2 D ranks.
    assert sum(1 for d in document["descriptors"] if d["layer_id"] in (*QSA_LAYERS, ROPE_ID)
               and document["entries"]["prefill"][d["src_entry"]]["field"].startswith("qsa")) == 25 * 2
    shown = run_cli("plan", "--engine", "sglang", "--model", PRESET, "--p-tp", "4", "--d-tp", "2",
                    "--transfer-backend", "mooncake", env={"COLUMNS": "80"})
    assert "its compressed keys one item per page of 64 tokens (QSA_COMPRESSED)" in " ".join(shown.stdout.split())


def test_an_mtp_drafts_qsa_states_follow_the_targets_in_its_band():
    """The draft worker's QSATokenToKVPool (one full-attention layer) appends its pending entries
    and its compressed one after the target's, numbered by _remap_draft_layer_ids from the target's
    num_hidden_layers (48): its key ring 48, its RoPE ring 49, its compressed page 48."""
    document = json.loads(run_cli("plan", "--engine", "sglang", "--model", PRESET, "--p-tp", "2", "--d-tp", "2",
                                  "--speculative-algorithm", "NEXTN", "--format", "json").stdout)
    jsonschema.validate(document, document_schema("sglang-plan"))
    assert document["draft"]["mtp"] is True
    assert qsa(document) == ([("qsa_pending", i, RING) for i in QSA_LAYERS] + [("qsa_rope", ROPE_ID, ROPE)]
                             + [("qsa_pending", 48, RING), ("qsa_rope", 49, ROPE)]
                             + [("qsa_compressed", i, PAGE) for i in (*QSA_LAYERS, 48)])


def test_check_proves_the_qsa_bytes_and_sees_a_wrong_write():
    checked = json.loads(run_cli("check", "--engine", "sglang", "--model", PRESET, "--max-tp", "2",
                                 "--transfer-backend", "mooncake", "--format", "json").stdout)
    jsonschema.validate(checked, document_schema("sglang-check"))
    assert checked["unchecked"] == [] and checked["ok"]
    for pairing in checked["pairings"]:
        assert {k: pairing["bytes_wrong"][k] for k in ("qsa_pending", "qsa_rope", "qsa_compressed")} == dict.fromkeys(
            ("qsa_pending", "qsa_rope", "qsa_compressed"), 0)
    # The proof behind those zeros: a write one byte late, and a write left out.
    planned = plan(load_model(PRESET), 2, 1, backend="mooncake")
    late = [replace(w, dst=w.dst + 1) if w.field == "qsa_compressed" else w for w in planned.writes]
    dropped = [w for w in planned.writes if w.field != "qsa_rope"]
    assert replicated_wrong(planned.writes, planned.decode_entries, 1) == dict.fromkeys(
        ("ple_short_conv", "ple_ngram", "qsa_pending", "qsa_rope", "qsa_compressed"), 0)
    assert replicated_wrong(late, planned.decode_entries, 1)["qsa_compressed"] >= 12 * PAGE // 2
    assert replicated_wrong(dropped, planned.decode_entries, 1)["qsa_rope"] == ROPE


def test_preflight_refuses_compressed_keys_kept_in_other_dtypes_and_fixes_them():
    """--qsa-indexer-dtype fp8_e4m3 halves the compressed page (resolve_qsa_indexer_dtype); both
    senders pair the entries and refuse unequal items: Mooncake's _state_stride_mismatch at the
    decode peer's registration, NIXL's _send_kvcache_generic, in the same words."""
    launch = "python -m sglang.launch_server --model-path Qwen/Qwen3.8-Flash-Next --tp 2"
    for backend in ("mooncake", "nixl"):
        result = run_cli("preflight", "--prefill", f"{launch} --disaggregation-mode prefill "
                         f"--disaggregation-transfer-backend {backend}", "--decode",
                         f"{launch} --disaggregation-mode decode --disaggregation-transfer-backend {backend} "
                         "--qsa-indexer-dtype fp8_e4m3", "--format", "json")
        document = json.loads(result.stdout)
        assert result.code == 1 and document["verdict"] == "refused", result.stderr
        assert document["sglang"]["refusals"][0]["message"] == (
            f"StateType.QSA_COMPRESSED item length mismatch for paired entries src[0]={PAGE} dst[0]={PAGE // 2}")
        assert document["fix"]["verdict_after"] == "works"
        assert [c["flag"] for c in document["fix"]["changes"]] == ["--qsa-indexer-dtype"]
    same = run_cli("preflight", "--prefill", f"{launch} --disaggregation-mode prefill --qsa-indexer-dtype fp8_e4m3",
                   "--decode", f"{launch} --disaggregation-mode decode --qsa-indexer-dtype fp8_e4m3")
    assert same.code == 0 and same.stdout.startswith("WORKS"), same.stdout[:400]
    # SGLang's override for the model checks the platform, which preflight cannot see: it says so.
    assert "P: --qsa-indexer-dtype fp8_e4m3: SGLang starts only on a CUDA SM90 or SM100 GPU" in " ".join(
        same.stdout.split())


def test_a_qsa_indexer_dtype_without_the_indexer_stops_the_server():
    launch = "python -m sglang.launch_server --model-path Qwen/Qwen3.5-0.8B --page-size 1"
    result = run_cli("preflight", "--prefill", f"{launch} --disaggregation-mode prefill", "--decode",
                     f"{launch} --disaggregation-mode decode --qsa-indexer-dtype bfloat16", "--format", "json")
    document = json.loads(result.stdout)
    assert result.code == 1, result.stderr
    assert document["sglang"]["refusals"][0]["message"].endswith(
        "--qsa-indexer-dtype bfloat16 needs a model with a compressed QSA indexer (Qwen4-Exp); this model has none")
    assert document["fix"]["verdict_after"] == "works"


def test_a_qsa_profile_sglang_rejects_is_its_refusal(tmp_path):
    """parse_qsa_profile's checks and the pool's page check at the page SGLang sets (64)."""
    base = json.loads((FIXTURE).read_text())
    for changed, said in (({"indexer_compress_ratio": 3, "indexer_budget": 1536}, "page_size=64, ratio=3"),
                          ({"indexer_budget": 1024}, "to be one of [512, 2048], got 256"),
                          ({"indexer_compress_ratio": 1}, "QSA requires indexer_compress_ratio >= 2, got 1")):
        config = tmp_path / "config.json"
        config.write_text(json.dumps({**base, "text_config": {**base["text_config"], **changed}}))
        result = run_cli("plan", "--engine", "sglang", "--model", str(config), "--p-tp", "1", "--d-tp", "1")
        assert_refused(result, said)
        assert "SGLang does not start" in result.stderr


def test_execute_moves_and_checks_the_ple_states():
    result = run_cli("execute", "--engine", "sglang", "--model", PRESET, "--layers", "4", "--p-tp", "2",
                     "--d-tp", "1", "--device", "cpu", "--semantics", "exact", "--format", "json", timeout=300)
    assert result.code == 0, result.stderr[-2000:]
    document = json.loads(result.stdout)
    jsonschema.validate(document, document_schema("sglang-execute"))
    assert document["verified"] and document["bad_bytes"] == 0
    fields = {f["field"]: f for f in document["decode"][0]["fields"]}
    assert fields["ple_short_conv"]["item_bytes"] == WINDOW and fields["ple_ngram"]["item_bytes"] == 16
    # The QSA states of its one full-attention layer (3) moved whole and checked byte by byte.
    assert {f: fields[f]["item_bytes"] for f in ("qsa_pending", "qsa_rope", "qsa_compressed")} == {
        "qsa_pending": RING, "qsa_rope": ROPE, "qsa_compressed": PAGE}


def test_inspect_lists_the_replicated_side_states():
    result = run_cli("inspect", "--engine", "sglang", "--model", PRESET, "--tp", "1,2", "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    jsonschema.validate(document, document_schema("sglang-inspect"))
    for tp in ("1", "2"):
        entries = {"entries": {"decode": document["entries"][tp]}}
        assert side(entries) == [("ple_short_conv", 1, WINDOW, 0), ("ple_ngram", NGRAM_ID, 16, 0)]
        assert qsa(entries) == [("qsa_pending", 3, RING), ("qsa_rope", ROPE_ID, ROPE), ("qsa_compressed", 3, PAGE)]
    shown = run_cli("inspect", "--engine", "sglang", "--model", PRESET, "--tp", "2", env={"COLUMNS": "80"})
    assert ("SGLang's replicated states, whole on every rank (the first entry of each): ple_short_conv 184,320 B "
            "(layer 1)") in " ".join(shown.stdout.split())


def test_aliceai_is_sglangs_refusal(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "architectures": ["AliceAIForCausalLM"], "model_type": "alice_ai", "torch_dtype": "bfloat16",
        "num_hidden_layers": 4, "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "linear_num_key_heads": 32, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 256}))
    result = run_cli("plan", "--engine", "sglang", "--model", str(config), "--p-tp", "1", "--d-tp", "2")
    assert_refused(result, "SGLang 0.5.23 has no AliceAI model file")


def test_preflight_says_nixls_refusal_of_the_replicated_state_and_fixes_it():
    launch = ("python -m sglang.launch_server --model-path Qwen/Qwen3.8-Flash-Next "
              "--disaggregation-transfer-backend nixl")
    result = run_cli("preflight", "--prefill", f"{launch} --disaggregation-mode prefill --tp 1",
                     "--decode", f"{launch} --disaggregation-mode decode --tp 2", "--format", "json")
    document = json.loads(result.stdout)
    assert result.code == 1 and document["verdict"] == "refused", result.stderr
    assert document["sglang"]["refusals"][0]["message"].startswith("Replicated Mamba PD state transfer")
    assert document["fix"]["verdict_after"] == "works"


def test_vllms_indexer_kv_dtype_is_refused_whatever_its_value():
    for command in (("plan", "--p-tp", "1", "--d-tp", "2"), ("check", "--pairs", "1:2"), ("inspect",)):
        for value in ("fp8", "mxfp4"):
            result = run_cli(*command, "--engine", "sglang", "--model", PRESET, "--indexer-kv-dtype", value)
            assert result.code == 2 and result.stdout == "", (command, value, result.stderr)
            assert result.stderr.startswith("error: --indexer-kv-dtype: vLLM's option") and "Traceback" not in \
                result.stderr
