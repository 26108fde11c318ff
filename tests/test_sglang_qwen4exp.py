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

import jsonschema

from cli_run import assert_refused, run_cli
from mambaxfer_cli.engines.sglang.plan import plan
from mambaxfer_cli.engines.sglang.verdict import verdict
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.schema import document_schema

PRESET = "qwen3.8-flash-next"
# Its config: hidden_size 2560, hc_count 4, ple_conv_kernel_size 4, ngram_size 3, ple_layer_ids [2].
WINDOW = 2560 * 4 * (4 - 1) * 3 * 2          # bf16 (SGLANG_MAMBA_CONV_DTYPE's default)
NGRAM_ID = 2**32 - 1


def side(document: dict) -> list[tuple]:
    return [(e["field"], e["layer_id"], e["item_len"], e["dim"]) for e in document["entries"]["decode"]
            if e["field"] not in ("conv", "temporal")]


def test_qwen4exp_entries_are_sglangs_with_the_ple_states_after_the_gdn_ones():
    result = run_cli("plan", "--engine", "sglang", "--model", PRESET, "--p-tp", "2", "--d-tp", "1",
                     "--transfer-backend", "mooncake", "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    jsonschema.validate(document, document_schema("sglang-plan"))
    assert side(document) == [("ple_short_conv", 1, WINDOW, 0), ("ple_ngram", NGRAM_ID, 16, 0)]
    fields = [e["field"] for e in document["entries"]["prefill"]]
    assert fields == ["conv"] * 36 + ["temporal"] * 36 + ["ple_short_conv", "ple_ngram"]
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
    assert not plan(no_ple, 1, 1).prefill_entries[-1].replicated


def test_check_refuses_over_nixl_and_proves_the_rest():
    result = run_cli("check", "--engine", "sglang", "--model", PRESET, "--max-tp", "2", "--transfer-backend",
                     "nixl", "--format", "json")
    assert result.code == 1, result.stderr
    outcomes = {(p["p_tp"], p["d_tp"]): p["outcome"] for p in json.loads(result.stdout)["pairings"]}
    assert outcomes == {(1, 1): "right", (2, 2): "right", (1, 2): "refused", (2, 1): "refused"}


def test_the_qsa_indexers_states_are_named_as_not_modelled():
    """SGLang 0.5.23 sends a QSATokenToKVPool's QSA_PENDING and QSA_COMPRESSED states too
    (disaggregation/utils.py, prefill.py); mambaxfer does not model them, and says so in the
    verdict (plan's text and JSON) and check's unchecked lines, never for a model without them."""
    said = "the QSA indexer's pending and compressed states, which SGLang moves too"
    document = json.loads(run_cli("plan", "--engine", "sglang", "--model", PRESET, "--p-tp", "1", "--d-tp", "2",
                                  "--format", "json").stdout)
    jsonschema.validate(document, document_schema("sglang-plan"))
    verdict_ = document["verdict"]
    assert verdict_["not_modelled"] == [said] and f"(not modelled: {said})" in verdict_["sentence"]
    other = json.loads(run_cli("plan", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp",
                               "2", "--format", "json").stdout)
    assert other["verdict"]["not_modelled"] == [] and "not modelled" not in other["verdict"]["sentence"]
    checked = json.loads(run_cli("check", "--engine", "sglang", "--model", PRESET, "--max-tp", "2",
                                 "--format", "json").stdout)
    assert checked["unchecked"] == [f"{PRESET}: not checked: {said}"]


def test_execute_moves_and_checks_the_ple_states():
    result = run_cli("execute", "--engine", "sglang", "--model", PRESET, "--layers", "4", "--p-tp", "2",
                     "--d-tp", "1", "--device", "cpu", "--semantics", "exact", "--format", "json", timeout=300)
    assert result.code == 0, result.stderr[-2000:]
    document = json.loads(result.stdout)
    jsonschema.validate(document, document_schema("sglang-execute"))
    assert document["verified"] and document["bad_bytes"] == 0
    fields = {f["field"]: f for f in document["decode"][0]["fields"]}
    assert fields["ple_short_conv"]["item_bytes"] == WINDOW and fields["ple_ngram"]["item_bytes"] == 16


def test_inspect_lists_the_replicated_side_states():
    result = run_cli("inspect", "--engine", "sglang", "--model", PRESET, "--tp", "1,2", "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    jsonschema.validate(document, document_schema("sglang-inspect"))
    for tp in ("1", "2"):
        assert side({"entries": {"decode": document["entries"][tp]}}) == [
            ("ple_short_conv", 1, WINDOW, 0), ("ple_ngram", NGRAM_ID, 16, 0)]
    shown = run_cli("inspect", "--engine", "sglang", "--model", PRESET, "--tp", "2", env={"COLUMNS": "80"})
    assert "SGLang's replicated side states, whole on every rank: ple_short_conv 184,320 B (layer 1)" in " ".join(
        shown.stdout.split())


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
