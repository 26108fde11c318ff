"""SGLang's own terms under --engine sglang: its state layer ids, its default transfer backend,
its refusals, its verdict on two servers of different models, what it serves, and the vLLM
options it never reads. Each fact is pinned from SGLang 0.5.23's code (cited at each test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_run import assert_refused, assert_user_error, messages, run_cli
from mambaxfer_cli.readers.model_config import spec_from_config
from mambaxfer_cli.readers.model_source import compiled_presets


def words(text: str) -> str:
    return " ".join(text.split())


def _json(*args: str) -> dict:
    result = run_cli(*args, "--format", "json")
    assert result.code in (0, 1), result.stderr
    return json.loads(result.stdout)


# --- 1. the layer ids of the state entries (MambaPool.get_state_layer_ids) ----------------------------

def _sglang_layer_ids(name: str) -> list[int]:
    """SGLang's config class's ``mamba2_cache_params.layers``, by its rule for each preset's family."""
    config = compiled_presets()[name]["config"]
    if "hybrid_override_pattern" in config:        # NemotronHConfig.mamba_layer_ids
        return [i for i, ch in enumerate(config["hybrid_override_pattern"]) if ch == "M"]
    if config["model_type"] == "granitemoehybrid":  # GraniteMoeHybridConfig.mamba_layer_ids
        return [i for i, kind in enumerate(config["layer_types"]) if kind == "mamba"]
    text = config.get("text_config", config)
    if "full_attention_interval" in text:          # Qwen3NextConfig.linear_layer_ids
        return [i for i in range(text["num_hidden_layers"]) if (i + 1) % text["full_attention_interval"]]
    return list(range(config.get("num_hidden_layers") or config["n_layer"]))   # MambaConfig, Mamba2Config


def test_nemotron_h_entries_carry_sglang_s_layer_ids():
    document = _json("plan", "--engine", "sglang", "--model", "nemotron-h-8b", "--p-tp", "1", "--d-tp", "2")
    for side in ("prefill", "decode"):
        for field in ("conv", "temporal"):
            ids = [e["layer_id"] for e in document["entries"][side] if e["field"] == field]
            assert ids[:5] == [0, 2, 4, 6, 9] and ids == _sglang_layer_ids("nemotron-h-8b")
    assert sorted({d["layer_id"] for d in document["descriptors"]}) == _sglang_layer_ids("nemotron-h-8b")
    text = words(run_cli("plan", "--engine", "sglang", "--model", "nemotron-h-8b", "--p-tp", "1", "--d-tp", "2").stdout)
    assert "layer ids (MambaPool.get_state_layer_ids, the model's own): 0, 2, 4, 6, 9, 11," in text


@pytest.mark.parametrize("name", ["granite-4.0-h-tiny", "qwen3.5-0.8b", "qwen3-next-80b", "mamba-130m"])
def test_every_served_preset_s_entries_carry_sglang_s_layer_ids(name):
    document = _json("plan", "--engine", "sglang", "--model", name, "--p-tp", "1", "--d-tp", "1")
    ids = [e["layer_id"] for e in document["entries"]["prefill"] if e["field"] == "conv"]
    assert ids == _sglang_layer_ids(name)


def test_the_model_numbers_its_layers_mlp_and_both_mixers_included():
    # FalconH1Config.linear_layer_ids: every layer has an SSM (and an attention) block.
    falcon = spec_from_config({"model_type": "falcon_h1", "hidden_size": 1024, "mamba_expand": 2,
                               "mamba_n_heads": 24, "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_d_state": 128,
                               "mamba_d_conv": 4, "num_hidden_layers": 3, "num_attention_heads": 8,
                               "num_key_value_heads": 2}, name="falcon", source="test")
    assert falcon.ssm_layer_ids == (0, 1, 2)
    nemotron = spec_from_config({"model_type": "nemotron_h", "mamba_num_heads": 4, "mamba_head_dim": 16,
                                 "ssm_state_size": 16, "n_groups": 2, "conv_kernel": 4, "num_hidden_layers": 6,
                                 "hybrid_override_pattern": "M-*EM-", "num_key_value_heads": 2,
                                 "head_dim": 16}, name="nemotron", source="test")
    assert nemotron.ssm_layer_ids == (0, 4)


# --- 2. the default transfer backend (--disaggregation-transfer-backend: mooncake) ---------------------

@pytest.mark.parametrize("command", [("plan", "--p-tp", "1", "--d-tp", "2"), ("check", "--pairs", "1:2")])
def test_plan_and_check_default_to_sglang_s_default_backend(command):
    document = _json(command[0], "--engine", "sglang", "--model", "qwen3.5-0.8b", *command[1:])
    assert document["backend"] == "mooncake"
    text = words(run_cli(command[0], "--engine", "sglang", "--model", "qwen3.5-0.8b", *command[1:]).stdout)
    assert "over Mooncake" in text and "NIXL" not in text
    nixl = _json(command[0], "--engine", "sglang", "--model", "qwen3.5-0.8b", *command[1:],
                 "--transfer-backend", "nixl")
    assert nixl["backend"] == "nixl"


def test_the_help_names_mooncake_the_default():
    text = words(run_cli("plan", "--help", env={"COLUMNS": "200"}).stdout)
    assert "mooncake (SGLang's default) or nixl" in text and "nixl (the default)" not in text


# --- 6. vLLM's options, given at all, are refused under --engine sglang --------------------------------

@pytest.mark.parametrize("flag", [("--seed", "0"), ("--request-blocks", "1"), ("--attention-streams", "1"),
                                  ("--block-size", "16")])
@pytest.mark.parametrize("command", [("plan", "--p-tp", "1", "--d-tp", "2"), ("check", "--pairs", "1:2")])
def test_vllm_s_options_at_their_default_are_refused(command, flag):
    result = run_cli(command[0], "--engine", "sglang", "--model", "qwen3.5-0.8b", *command[1:], *flag)
    assert_user_error(result, flag[0])
    assert len(messages(result.stderr.strip())) == 1 and result.stdout == ""


def test_beside_vllm_its_options_stay_vllm_s():
    result = run_cli("check", "--engine", "vllm,sglang", "--model", "qwen3.5-0.8b", "--pairs", "1:2",
                     "--block-size", "1024", "--format", "json")
    assert result.code == 0, result.stderr


# --- 3. refusals in SGLang's terms, with SGLang's place ------------------------------------------------

FIXTURES = Path(__file__).with_name("fixtures") / "hf-configs"
INTERNS2 = {"architectures": ["InternS2PreviewForConditionalGeneration"], "model_type": "interns2_preview"}


@pytest.mark.parametrize("config, fragments", [
    # No srt/models/ file of SGLang 0.5.23 has BambaForCausalLM or KimiK31ForConditionalGeneration in its
    # EntryClass (scripts/sglang_architectures.py reads them all).
    ("ibm-ai-platform__Bamba-9B.partial.json", ("SGLang 0.5.23 has no model class BambaForCausalLM",
                                                "EntryClass", "configs/hybrid_arch.py")),
    ("kimi-k3.1.example.json", ("SGLang 0.5.23 has no model class KimiK31ForConditionalGeneration",)),
    # models/interns2preview.py serves it; hybrid_arch.py's hybrid_gdn_config finds its state.
    (INTERNS2, ("SGLang 0.5.23 serves InternS2-Preview (models/", "InternS2PreviewConfig",
                "hybrid_gdn_config in configs/hybrid_arch.py mambaish_config")),
])
@pytest.mark.parametrize("command", [("plan", "--p-tp", "1", "--d-tp", "2"), ("check", "--pairs", "1:2")])
def test_sglang_s_refusals_speak_of_sglang(tmp_path, config, fragments, command):
    path = FIXTURES / config if isinstance(config, str) else tmp_path / "config.json"
    if isinstance(config, dict):
        path.write_text(json.dumps(config))
    result = run_cli(command[0], "--engine", "sglang", "--model", str(path), *command[1:])
    # a model SGLang does not serve is its refusal (exit 1); one it serves, with a state mambaxfer
    # does not read, is mambaxfer's limit (exit 2)
    (assert_user_error if isinstance(config, dict) else assert_refused)(result, *fragments)
    assert "vLLM" not in result.stderr and "NIXL connector" not in result.stderr


def test_the_served_architectures_are_sglang_s_entry_classes():
    from mambaxfer_cli.engines.sglang.served import ARCHITECTURES, STATE_NOT_READ

    assert ARCHITECTURES["NemotronHForCausalLM"] == "models/nemotron_h.py"
    assert ARCHITECTURES["Qwen3_5ForConditionalGeneration"] == "models/qwen3_5.py"
    assert "BambaForCausalLM" not in ARCHITECTURES and "JambaForCausalLM" not in ARCHITECTURES
    assert set(STATE_NOT_READ) <= set(ARCHITECTURES)


# --- 4. two servers of different models (build_transfer_entry_pairs) ---------------------------------

LAUNCH = "python -m sglang.launch_server --tp 1 --page-size 1"


def _preflight(p_model: str, d_model: str) -> tuple[int, dict]:
    result = run_cli("preflight", "--prefill", f"{LAUNCH} --model-path {p_model} --disaggregation-mode prefill",
                     "--decode", f"{LAUNCH} --model-path {d_model} --disaggregation-mode decode", "--format", "json")
    assert "Traceback" not in result.stderr, result.stderr
    return result.code, json.loads(result.stdout)


def test_two_servers_of_different_models_fail_every_request():
    # Qwen3.5-0.8B's state layers are 0, 1, 2, 4, ...; Nemotron-H-8B's 0, 2, 4, 6, 9, ...: SGLang pairs
    # the entries by layer id and finds no decode entry for layer 1.
    code, doc = _preflight("Qwen/Qwen3.5-0.8B", "nvidia/Nemotron-H-8B-Base-8K")
    assert code == 1 and doc["verdict"] == "fails"
    said = words(doc["headline"])
    assert "build_transfer_entry_pairs" in said and "Decode peer is missing a transfer entry for model layer 1" in said


def test_the_same_layers_of_another_model_are_written_into_its_slots(tmp_path):
    # Nemotron-H-8B with other Mamba heads: the layer ids pair, the state is another model's.
    config = dict(compiled_presets()["nemotron-h-8b"]["config"], mamba_num_heads=64)
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, doc = _preflight("nvidia/Nemotron-H-8B-Base-8K", str(tmp_path))
    assert code == 1 and doc["verdict"] != "works"
    assert "D decodes from another model's state" in words(json.dumps(doc))
    same_code, same = _preflight("nvidia/Nemotron-H-8B-Base-8K", "nvidia/Nemotron-H-8B-Base-8K")
    assert same_code == 0 and same["verdict"] == "works"


# --- 5. what SGLang serves: models --engine sglang, and its column beside vLLM's ----------------------

def test_models_lists_what_sglang_serves_and_why_not_the_rest():
    document = _json("models", "--engine", "sglang")
    rows = {row["name"]: row for row in document["models"]}
    assert rows["nemotron-h-8b"]["sglang_file"] == "models/nemotron_h.py" and rows["nemotron-h-8b"]["answered"]
    assert rows["jamba"]["sglang_file"] is None and rows["jamba"]["why"] == "SGLang 0.5.23 has no Jamba model file"
    assert rows["kimi-linear-48b"]["sglang_file"] == "models/kimi_linear.py" and rows["kimi-linear-48b"]["answered"]
    assert {u["label"] for u in document["state_not_read"]} >= {"InternS2-Preview"}
    assert rows["gigachat3.5"]["sglang_file"] == "models/gigachat35.py" and rows["gigachat3.5"]["answered"]
    assert rows["lfm2-1.2b"]["sglang_file"] == "models/lfm2.py" and rows["lfm2-1.2b"]["answered"]
    result = run_cli("models", "--engine", "sglang", env={"COLUMNS": "80"})
    assert result.code == 0 and max(map(len, result.stdout.splitlines())) <= 80
    assert "– jamba: SGLang 0.5.23 has no Jamba model file" in result.stdout
    assert json.loads(run_cli("models", "--format", "json").stdout)["schema"] == "mambaxfer.models/v1"


def test_check_beside_vllm_keeps_vllm_s_column_for_a_model_sglang_does_not_serve():
    result = run_cli("check", "--engine", "vllm,sglang", "--model", "jamba", "--max-tp", "2", "--format", "json")
    assert result.code == 1, result.stderr       # SGLang serves none of the models asked about
    document = json.loads(result.stdout)
    assert len(document["vllm"]["results"]) == 4 and document["vllm"]["ok"]
    assert document["sglang"]["pairings"] == [] and document["sglang"]["unchecked"] == [
        "jamba: SGLang 0.5.23 has no Jamba model file"]
    text = words(run_cli("check", "--engine", "vllm,sglang", "--model", "jamba", "--max-tp", "2").stdout)
    assert "– not checked" in text and "jamba: SGLang 0.5.23 has no Jamba model file" in text


def test_check_beside_sglang_keeps_sglang_s_column_for_a_model_vllm_does_not_serve():
    result = run_cli("check", "--engine", "vllm,sglang", "--model", "gigachat3.5", "--max-tp", "2", "--format",
                     "json")
    assert result.code == 1, result.stderr       # vLLM serves none of the models asked about
    document = json.loads(result.stdout)
    assert document["vllm"]["results"] == [] and len(document["vllm"]["unchecked"]) == 1
    assert "GigaChat35ForCausalLM" in document["vllm"]["unchecked"][0]
    assert len(document["sglang"]["pairings"]) == 4 and not document["sglang"]["ok"]
    alone = run_cli("check", "--engine", "vllm", "--model", "gigachat3.5", "--max-tp", "2")
    assert alone.code == 1 and alone.stdout == "" and "GigaChat35ForCausalLM" in alone.stderr
