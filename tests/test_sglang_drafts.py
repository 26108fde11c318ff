"""SGLang's speculative decoding: the draft model's KV pool appended to the transfer on both sides
(--speculative-algorithm, --draft-model), on the released configs: Qwen3.5's and
Qwen3-Next's MTP layer, Nemotron-3-Super's, and SpecForge's EAGLE-3 drafter for Qwen3.5-4B."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from cli_run import assert_refused, assert_user_error, run_cli, run_json
from mambaxfer_cli.engines.sglang.drafts import draft_for
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.schema import document_schema

FIXTURES = Path(__file__).parent / "fixtures" / "hf-configs"
SUPER = str(FIXTURES / "nvidia__NVIDIA-Nemotron-3-Super-120B-A12B-BF16.partial.json")
EAGLE3 = str(FIXTURES / "sgl-project__SpecForge__qwen3.5-4b-eagle3.json")


def plan_json(*args: str) -> dict:
    result = run_cli("plan", "--engine", "sglang", *args, "--format", "json")
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("model, band, heads, size", [("qwen3.5-0.8b", 24, 2, 256), ("qwen3-next-80b", 48, 2, 256),
                                                      (SUPER, 88, 2, 128), ("qwen3.8-flash-next", 48, 2, 256)])
def test_nextn_appends_the_mtp_layer_as_one_attention_layer_above_the_targets(model, band, heads, size):
    """ModelConfig._config_draft_model: one MTP layer (num_nextn_predict_layers = 1) with the
    target's heads; build_kv_layer_ids numbers it num_hidden_layers."""
    draft = plan_json("--model", model, "--p-tp", "1", "--d-tp", "2", "--speculative-algorithm", "nextn")["draft"]
    assert draft == {"algorithm": "EAGLE", "source": draft["source"], "layers": 1, "num_kv_heads": heads,
                     "head_size": size, "band": band, "mtp": True}
    text = run_cli("plan", "--engine", "sglang", "--model", model, "--p-tp", "1", "--d-tp", "2",
                   "--speculative-algorithm", "NEXTN").stdout
    assert f"K then V of layer id {band}" in " ".join(text.split())


def test_draft_entries_are_k_then_v_pages_with_the_heads_of_each_rank():
    draft = draft_for(load_model("qwen3.5-0.8b"), "NEXTN", None)
    assert draft is not None
    at_two = draft.entries(load_model("qwen3.5-0.8b"), 2, 4)
    assert [(e.field, e.layer_id, e.item_len, e.dim) for e in at_two] == [("k", 24, 4 * 256 * 2, 1),
                                                                          ("v", 24, 4 * 256 * 2, 1)]


def test_an_eagle3_drafter_brings_its_own_layers_and_heads():
    draft = plan_json("--model", "qwen3.5-0.8b", "--p-tp", "2", "--d-tp", "2", "--speculative-algorithm", "EAGLE3",
                      "--draft-model", EAGLE3)["draft"]
    assert (draft["layers"], draft["num_kv_heads"], draft["head_size"], draft["band"]) == (1, 4, 256, 24)


def test_a_drafter_with_other_heads_where_tp_differs_is_refused_or_out_of_reach():
    """Mooncake's send_kvcache_slice fails a request whose KV entries differ in item length; NIXL's
    slices them with the target's heads, which mambaxfer does not plan."""
    args = ("plan", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2",
            "--speculative-algorithm", "EAGLE3", "--draft-model", EAGLE3)
    assert_refused(run_cli(*args), "head-sliced transfer assumes one item length for every KV entry")
    assert_user_error(run_cli(*args, "--transfer-backend", "nixl"), "_init_hetero_tp_prep_handle")


def test_sglangs_refusals_and_mambaxfers_limits_of_the_speculative_flags():
    base = ("plan", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "1")
    assert_refused(run_cli(*base, "--speculative-algorithm", "medusa"),
                   "\"Unknown speculative algorithm name: medusa\"")
    assert_user_error(run_cli("plan", "--engine", "sglang", "--model", "jamba", "--p-tp", "1", "--d-tp", "1",
                              "--speculative-algorithm", "NEXTN"), "no MTP draft class")
    assert_user_error(run_cli(*base, "--speculative-algorithm", "DFLASH"), "not DFLASH's")
    assert_user_error(run_cli(*base, "--draft-model", EAGLE3), "needs --speculative-algorithm")
    assert plan_json(*base[3:], "--speculative-algorithm", "ngram")["draft"] is None


def test_a_hybrid_draft_model_is_refused_in_one_line():
    """Falcon-H1-0.5B as a STANDALONE draft: no MTP class of SGLang's takes it, and its draft worker
    builds it a hybrid pool (full-attention KV and Mamba state), not the attention layers
    mambaxfer would append for every one of its layers."""
    falcon = str(FIXTURES / "tiiuae__Falcon-H1-0.5B-Base.partial.json")
    assert_user_error(run_cli("plan", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "1",
                              "--speculative-algorithm", "STANDALONE", "--draft-model", falcon),
                      "a hybrid draft model (falcon_h1)")


@pytest.mark.parametrize("keys, refusal", [
    ({"mtp_hybrid_override_pattern": "**E"}, "IndexError: list index out of range"),
    ({"mtp_layers_block_type": ["attention", "attention", "moe"]}, "'*' at place 1 of **E"),
    ({"mtp_layers_block_type": ["moe", "attention"]}, "'*' at place 1 of E*"),
    ({"mtp_layers_block_type": ["attention", "moe", "moe"]}, None),
    ({"mtp_layers_block_type": ["attention", "moe"], "mtp_hybrid_override_pattern": "*M"}, "'M' in *M"),
    ({"mtp_layers_block_type": ["mamba", "moe"]}, "'M' in ME not implemented"),
    ({"mtp_layers_block_type": ["sliding", "moe"]}, "contains invalid types"),
])
def test_nemotron_h_mtp_pattern_is_read_as_sglang_reads_it(tmp_path, keys, refusal):
    """NemotronHConfig takes mtp_layers_block_type unless it is absent or the default list; the
    pool keeps one layer (num_nextn_predict_layers = 1), which a '*' past the pattern's first place
    writes past (its layer id is its place): SGLang's IndexError."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**json.loads(Path(SUPER).read_text()), **keys}))
    args = ("--model", str(config), "--p-tp", "1", "--d-tp", "2", "--speculative-algorithm", "NEXTN")
    if refusal:
        assert_refused(run_cli("plan", "--engine", "sglang", *args), refusal)
    else:
        assert plan_json(*args)["draft"]["layers"] == 1


def test_each_engine_refuses_the_others_speculative_flags():
    assert_user_error(run_cli("plan", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "1",
                              "--speculative-config", "{\"method\":\"mtp\",\"num_speculative_tokens\":1}"),
                      "--speculative-config: vLLM's option")
    assert_user_error(run_cli("plan", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "1",
                              "--speculative-algorithm", "NEXTN"), "SGLang's option")


def test_check_plans_each_pairing_with_the_draft_and_refuses_in_sglangs_words():
    args = ("check", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--pairs", "1:2,2:2")
    code, doc = run_json(*args, "--speculative-algorithm", "NEXTN", "--format", "json")
    assert code == 0 and [p["draft"]["band"] for p in doc["pairings"]] == [24, 24], doc
    jsonschema.validate(doc, document_schema("sglang-check"))
    assert "K then V of layer id 24" in " ".join(run_cli(*args, "--speculative-algorithm", "NEXTN").stdout.split())
    assert_refused(run_cli(*args, "--speculative-algorithm", "EAGLE3", "--draft-model", EAGLE3),
                   "head-sliced transfer assumes one item length for every KV entry")
    assert_refused(run_cli(*args, "--speculative-algorithm", "medusa"), "Unknown speculative algorithm name")


def test_inspect_says_the_drafts_kv_per_tp_size():
    code, doc = run_json("inspect", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--tp", "1,2",
                         "--speculative-algorithm", "NEXTN", "--format", "json")
    assert code == 0 and doc["draft"]["band"] == 24
    jsonschema.validate(doc, document_schema("sglang-inspect"))
    assert doc["draft"]["token_bytes"] == {"1": 2 * 256 * 2, "2": 256 * 2}   # 2 KV heads of 256 in bfloat16


@pytest.mark.usefixtures("nixl")
@pytest.mark.parametrize("semantics", ["sglang", "exact"])
def test_execute_moves_and_verifies_the_draft_pages(semantics):
    """The draft's K and V pages travel after the target's, every byte checked on each D rank."""
    args = ("execute", "--engine", "sglang", "--device", "cpu", "--format", "json", "--model", "qwen3.5-0.8b",
            "--p-tp", "1", "--d-tp", "2", "--layers", "4", "--iters", "1", "--semantics", semantics)
    code, without = run_json(*args)
    code_draft, drafted = run_json(*args, "--speculative-algorithm", "NEXTN")
    assert code == code_draft == 0 and drafted["verified"] and drafted["bad_bytes"] == 0, drafted
    assert drafted["attention"]["draft_layers"] == 1 and without["attention"]["draft_layers"] == 0
    # K and V of one layer, 4 tokens of 2 heads of 512 B, split over the two D ranks.
    assert drafted["total_bytes"] - without["total_bytes"] == 2 * 4 * 2 * 512
    assert [d["entries"] - w["entries"] for d, w in zip(drafted["decode"], without["decode"])] == [2, 2]


LAUNCH = "python -m sglang.launch_server --model-path Qwen/Qwen3.5-0.8B"


def preflight(p_flags: str, d_flags: str) -> tuple[int, dict]:
    result = run_cli("preflight", "--prefill", f"{LAUNCH} --disaggregation-mode prefill {p_flags}",
                     "--decode", f"{LAUNCH} --disaggregation-mode decode {d_flags}", "--format", "json")
    assert "Traceback" not in result.stderr, result.stderr
    return result.code, json.loads(result.stdout)


def test_preflight_checks_the_drafts_bytes_and_pairs_them():
    code, doc = preflight("--tp 1 --speculative-algorithm NEXTN", "--tp 2 --speculative-algorithm nextn")
    assert code == 0 and doc["verdict"] == "works", doc["headline"]
    row = next(f for f in doc["not_compared"] if f["field"].startswith("draft KV bytes"))
    assert (row["prefill"], row["decode"], row["agree"]) == ("1024 (1 layer)", "512 (1 layer)", True)


def test_preflight_fails_a_draft_only_p_sends_over_mooncake_and_fixes_d():
    """Mooncake pairs KV entries by layer id: D has none for the draft's band."""
    code, doc = preflight("--tp 1 --speculative-algorithm NEXTN", "--tp 2")
    assert code == 1 and doc["verdict"] == "fails", doc["headline"]
    assert "Decode peer is missing a transfer entry for model layer 24" in " ".join(doc["headline"].split())
    assert "--speculative-algorithm NEXTN" in doc["fix"]["decode"]


def test_preflight_refuses_in_sglangs_words():
    code, doc = preflight("--speculative-algorithm medusa", "")
    assert code == 1 and doc["verdict"] == "refused"
    assert "\"Unknown speculative algorithm name: medusa\"" in " ".join(doc["headline"].split())
    code, doc = preflight(f"--tp 1 --speculative-algorithm EAGLE3 --speculative-draft-model-path {EAGLE3}",
                          f"--tp 2 --speculative-algorithm EAGLE3 --speculative-draft-model-path {EAGLE3}")
    assert code == 1 and doc["verdict"] == "fails"
    assert "head-sliced transfer assumes one item length" in " ".join(doc["headline"].split())


@pytest.mark.usefixtures("nixl")
def test_execute_moves_an_eagle3_drafters_own_pages_at_equal_tp():
    """The drafter's 4 KV heads (the target's 2) fill pages of their own, whole at equal TP."""
    args = ("execute", "--engine", "sglang", "--device", "cpu", "--format", "json", "--model", "qwen3.5-0.8b",
            "--p-tp", "2", "--d-tp", "2", "--layers", "4", "--iters", "1")
    _, without = run_json(*args)
    code, drafted = run_json(*args, "--speculative-algorithm", "EAGLE3", "--draft-model", EAGLE3)
    assert code == 0 and drafted["verified"] and drafted["bad_bytes"] == 0, drafted
    assert drafted["total_bytes"] - without["total_bytes"] == 2 * 4 * 4 * 512


def test_check_proves_the_drafts_pages_and_catches_a_planted_fault(monkeypatch):
    from dataclasses import replace

    from mambaxfer_cli.engines.sglang import check

    model = load_model("qwen3.5-0.8b")
    draft = draft_for(model, "NEXTN", None)
    assert check.check_pairing(model, 1, 2, draft=draft).draft_wrong == 0
    real = check.sglang_kv_writes      # planted: every draft write lands one byte late
    monkeypatch.setattr(check, "sglang_kv_writes", lambda *a: tuple(replace(w, dst=w.dst + 1) for w in real(*a)))
    with pytest.raises(AssertionError, match=r"draft.s pages give [1-9][0-9,]* bytes wrong, the verdict 0 KV"):
        check.check_pairing(model, 1, 2, draft=draft)
