"""vLLM's outcome beyond the connector's arithmetic: the families its connector refuses, and the
dtypes as vLLM resolves them (a float32 checkpoint, a config's mamba_ssm_dtype, --dtype)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

from cli_run import assert_refused, assert_user_error, run_cli
from mambaxfer_cli.engines.sglang.shapes import sglang_model
from mambaxfer_cli.engines.vllm.releases import release
from mambaxfer_cli.engines.vllm.startup import replayssm_case
from mambaxfer_cli.readers.model_config import spec_from_config
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.schema import document_schema

FIXTURES = Path(__file__).parent / "fixtures" / "hf-configs"
QWEN3_NEXT = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "torch_dtype": "bfloat16",
              "mamba_ssm_dtype": "float32", "linear_num_key_heads": 16, "linear_num_value_heads": 32,
              "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
              "num_hidden_layers": 4, "full_attention_interval": 4, "num_attention_heads": 16,
              "num_key_value_heads": 2, "head_dim": 256, "hidden_size": 2048}


@pytest.mark.parametrize("arch, model_type, label, member", [
    ("Lfm2ForCausalLM", "lfm2", "LFM2", "SHORT_CONV"),
    ("Lfm3ForCausalLM", "lfm3", "LFM3", "SHORT_CONV"),
    ("ZayaForCausalLM", "zaya", "Zaya", "SHORT_CONV"),
    ("BailingMoeV2_5ForCausalLM", "bailing_moe_linear", "Bailing-V2.5", "LINEAR"),
])
def test_families_the_connector_refuses_are_refused_in_vllms_words(tmp_path, arch, model_type, label, member):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": [arch], "model_type": model_type, "hidden_size": 1024,
                                  "num_hidden_layers": 4}))
    result = run_cli("plan", "--model", str(config), "--p-tp", "1", "--d-tp", "2")
    assert_refused(result, f"vLLM serves {label} ({arch}), but its NIXL connector refuses its state",
                      "NotImplementedError: Conv transfer only supports Mamba1, Mamba2 and GDN models, got "
                      f"mamba_type=<MambaAttentionBackendEnum.{member}:", "(derive_mamba_conv_split)")


def test_a_float32_checkpoint_runs_in_bfloat16_unless_dtype_says_otherwise():
    auto = load_model("mamba-130m")
    assert (auto.model_dtype, auto.conv_dtype, auto.ssm_dtype, auto.checkpoint_dtype) == (
        "bfloat16", "bfloat16", "bfloat16", "float32")
    assert "--dtype auto runs in bfloat16" in auto.origin["conv_dtype"]
    literal = load_model("mamba-130m", dtype="float32")
    assert (literal.conv_dtype, literal.ssm_dtype) == ("float32", "float32")
    assert load_model("mamba-130m", dtype="float").conv_dtype == "float32"     # vLLM's alias
    # SGLang runs a float32 checkpoint in float16 (its KV), its state in its own dtypes.
    assert sglang_model(auto).model_dtype == "float16"
    inspected = json.loads(run_cli("inspect", "--model", "mamba-130m", "--tp", "1", "--format", "json").stdout)
    assert inspected["model"]["conv_dtype"] == "bfloat16"
    given = json.loads(run_cli("inspect", "--model", "mamba-130m", "--dtype", "float32", "--tp", "1", "--format",
                               "json").stdout)
    assert given["model"]["conv_dtype"] == "float32"
    assert given["layouts"]["1"][0]["conv_bytes"] == 2 * inspected["layouts"]["1"][0]["conv_bytes"]
    assert_user_error(run_cli("plan", "--model", "mamba-130m", "--dtype", "int3", "--p-tp", "1", "--d-tp", "1"),
                      "--dtype: invalid choice 'int3' (choose from auto, bfloat16, float, float16, float32, half)")


def test_mamba_ssm_dtype_is_read_only_by_the_classes_whose_hook_reads_it():
    qwen3_next = spec_from_config(QWEN3_NEXT, name="q3n", source="test")
    assert qwen3_next.ssm_dtype == "bfloat16"
    assert "does not read the config's mamba_ssm_dtype float32" in qwen3_next.origin["ssm_dtype"]
    qwen35 = spec_from_config({**QWEN3_NEXT, "architectures": ["Qwen3_5ForConditionalGeneration"],
                               "model_type": "qwen3_5"}, name="q35", source="test")
    assert qwen35.ssm_dtype == "float32" and qwen35.origin["ssm_dtype"] == "config key mamba_ssm_dtype"
    assert load_model("qwen3.5-0.8b").ssm_dtype == "float32"      # the preset's own config
    # An explicit --ssm-dtype still wins, without the note.
    given = spec_from_config(QWEN3_NEXT, name="q3n", source="test", ssm_dtype="float16")
    assert given.ssm_dtype == "float16" and given.origin["ssm_dtype"] == "--ssm-dtype"


OLMO_HYBRID = {  # OLMo-Hybrid's default dimensions (vLLM's olmo_hybrid.py reads the linear_* keys)
    "architectures": ["OlmoHybridForCausalLM"], "model_type": "olmo_hybrid", "hidden_size": 3840,
    "num_hidden_layers": 4, "num_attention_heads": 30, "num_key_value_heads": 30,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"], "linear_num_key_heads": 30,
    "linear_num_value_heads": 30, "linear_key_head_dim": 96, "linear_value_head_dim": 192,
    "linear_conv_kernel_dim": 4, "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize("arch, label", [
    ("OlmoHybridForCausalLM", "OLMo-Hybrid"),
    ("MiniCPMV4_6ForConditionalGeneration", "MiniCPM-V 4.6"),
    ("MiniCPMV4_7ForConditionalGeneration", "MiniCPM-V 4.7"),
    ("InternS2PreviewForConditionalGeneration", "InternS2 Preview"),
])
def test_served_architectures_carry_vllms_name_not_a_guess(arch, label):
    spec = spec_from_config({**OLMO_HYBRID, "architectures": [arch]}, name="m", source="m")
    assert spec.family == label and spec.variant == "gdn"
    # The same keys under an architecture vLLM does not name are a guess, and say so.
    guessed = spec_from_config({**OLMO_HYBRID, "architectures": []}, name="m", source="m")
    assert guessed.family.endswith("(guessed)")


def test_a_label_never_changes_the_variant_vllm_types_the_layers_as():
    # Nemotron3.5-Transcribe is Mamba2 in vLLM: a GDN config under its name keeps its guessed label.
    spec = spec_from_config({**OLMO_HYBRID, "architectures": ["Nemotron3_5TranscribeForConditionalGeneration"]},
                            name="m", source="m")
    assert spec.family.endswith("(guessed)")


def test_nemotron_3_5_transcribe_is_named_and_refused_replayssm(tmp_path):
    config = json.loads((FIXTURES / "nvidia__Nemotron-H-8B-Base-8K.partial.json").read_text())
    transcribe = {"architectures": ["Nemotron3_5TranscribeForConditionalGeneration"], "model_type": "nemotron3_5",
                  "text_config": config}
    spec = spec_from_config(transcribe, name="t", source="t")
    assert spec.family == "Nemotron3.5-Transcribe"
    # Only Nemotron-H's own class (and 0.34's Nano-VL) and the KDA classes support ReplaySSM.
    for rules in RULES.values():
        assert rules.replayssm(replayssm_case(spec, kv_connector=False)) == (
            "--use-replayssm is not supported for architecture 'Nemotron3_5TranscribeForConditionalGeneration'")


RULES = {"0.33": release("0.33"), "0.34": release("0.34")}
CONNECTOR = "--use-replayssm is incompatible with KV connectors (P/D disaggregation, KV cache offload)"


def test_kimis_replayssm_is_recoverssm_with_speculative_tokens_which_a_connector_moves():
    """validate_mamba_cached_kernel: a KDA architecture with speculative tokens runs RecoverSSM on the
    stock page (allowed beside a KV connector); without them it is ReplaySSM, refused beside one."""
    kimi = load_model("kimi-linear-48b")
    for rules in RULES.values():
        assert rules.replayssm(replayssm_case(replace(kimi, num_spec=2))) is None
        assert rules.replayssm(replayssm_case(kimi)) in (CONNECTOR, TRITON_V1)
        assert "not supported for architecture 'Glm5NextForConditionalGeneration'" in (
            rules.replayssm(replayssm_case(load_model("glm-5-next"))) or "")


TRITON_V1 = "Triton ReplaySSM requires Model Runner V1; use --mamba-backend flashinfer or Model Runner V1"


@pytest.mark.parametrize("release_name, settings, expected", [
    # Nemotron-H (ReplaySSM): 0.33 runs triton ReplaySSM on Model Runner V1 only, and V2 is its default.
    ("0.33", {}, TRITON_V1),
    ("0.33", {"v2_runner": False}, CONNECTOR),
    ("0.34", {}, CONNECTOR),
    ("0.33", {"backend": "flashinfer"},
     "FlashInfer ReplaySSM does not support prefix caching yet; use --disable-prefix-caching"),
    ("0.33", {"backend": "flashinfer", "cache_mode": "none"}, CONNECTOR),
    ("0.34", {"backend": "flashinfer"}, CONNECTOR),
    ("0.34", {"backend": "flashinfer", "model_dtype": "float16"},
     "FlashInfer ReplaySSM align requires bfloat16 model inputs for its replay rings; SSM state cache dtype is "
     "independent"),
    ("0.34", {"backend": "flashinfer", "buffer_len": 17}, "FlashInfer ReplaySSM requires --replayssm-buffer-len <= 16"),
    ("0.34", {"backend": "flashinfer", "pipeline": 2},
     "FlashInfer ReplaySSM currently requires pipeline_parallel_size=1"),
    ("0.34", {"backend": "cpu"}, "--use-replayssm requires --mamba-backend triton or flashinfer"),
    # With speculative tokens: FlashInfer only, and a ring for the verify window.
    ("0.34", {"num_spec": 2}, "Mamba2 ReplaySSM speculative decoding requires --mamba-backend flashinfer"),
    ("0.34", {"num_spec": 2, "backend": "flashinfer", "buffer_len": 2},
     "FlashInfer ReplaySSM speculative decoding requires --replayssm-buffer-len >= 1 + num_speculative_tokens "
     "(3); got 2"),
    ("0.33", {"num_spec": 2},
     "FlashInfer ReplaySSM speculative decoding does not support prefix caching; use --disable-prefix-caching"),
    ("0.33", {"num_spec": 2, "cache_mode": "none"},
     "Mamba2 ReplaySSM speculative decoding requires --mamba-backend flashinfer"),
    ("0.33", {"num_spec": 2, "cache_mode": "none", "backend": "flashinfer"}, CONNECTOR),
])
def test_replayssm_start_up_checks_in_each_releases_order(release_name, settings, expected):
    """Each release's validate_mamba_cached_kernel (the same inputs give vLLM's own answer in
    conformance): the first check an engine with --use-replayssm fails, else the connector's."""
    nemotron = load_model("nemotron-h-8b")
    num_spec = settings.pop("num_spec", 0)
    case = replayssm_case(replace(nemotron, num_spec=num_spec), **settings)
    assert RULES[release_name].replayssm(case) == expected


@pytest.mark.parametrize("release_name", ["0.33", "0.34"])
def test_recoverssm_runs_triton_only(release_name):
    kimi = replace(load_model("kimi-linear-48b"), num_spec=2)
    rules = RULES[release_name]
    assert rules.replayssm(replayssm_case(kimi, backend="flashinfer")) == "RecoverSSM requires --mamba-backend triton"
    assert rules.replayssm(replayssm_case(kimi, pipeline=2)) == "RecoverSSM currently requires pipeline_parallel_size=1"
    assert rules.replayssm(replayssm_case(kimi, stochastic_rounding=True)).startswith("RecoverSSM supports bfloat16")
    without_v2 = rules.replayssm(replayssm_case(kimi, v2_runner=False))
    assert without_v2 == ("RecoverSSM with prefix caching requires VLLM_USE_V2_MODEL_RUNNER=1"
                          if release_name == "0.33" else None)


def test_preflight_takes_kimis_recoverssm_beside_the_connector():
    """--use-replayssm with speculative tokens on Kimi-Linear: RecoverSSM, the stock page; vLLM starts
    and the connector moves it (the same lines without speculative tokens are refused)."""
    spec = json.dumps({"method": "eagle3", "model": "org/kimi-eagle3", "num_speculative_tokens": 2})

    def line(role: str, extra: str) -> str:
        transfer = json.dumps({"kv_connector": "NixlConnector", "kv_role": role})
        return (f"VLLM_SSM_CONV_STATE_LAYOUT=DS vllm serve moonshotai/Kimi-Linear-48B-A3B-Instruct -tp 1 "
                f"--use-replayssm --kv-transfer-config '{transfer}' {extra}")

    speculative = f"--speculative-config '{spec}'"
    result = run_cli("preflight", "--prefill", line("kv_producer", speculative), "--decode",
                     line("kv_consumer", speculative), "--format", "json")
    doc = json.loads(result.stdout)
    assert result.code == 0 and doc["verdict"] == "works", result.stdout[-2000:]
    assert any("RecoverSSM" in w for w in doc["warnings"])
    result = run_cli("preflight", "--prefill", line("kv_producer", ""), "--decode", line("kv_consumer", ""),
                     "--format", "json")
    doc = json.loads(result.stdout)
    assert result.code == 1 and "incompatible with KV connectors" in doc["headline"]


@pytest.mark.parametrize("model", ["kimi-linear-48b", "glm-5-next", str(FIXTURES / "kimi-k3.example.json")])
def test_mla_under_float32_gets_no_attention_backend(model):
    """Every CUDA MLA backend's ``supported_dtypes`` is float16 and bfloat16 (v1/attention/backends/mla/,
    the sparse ones bfloat16 alone), so ``CudaPlatform.get_attn_backend_cls`` (platforms/cuda.py)
    raises "No valid attention backend found for cuda ..." as an MLA layer is built with
    ``--dtype float32``: plan's verdict refuses at start-up, check exits 1; bfloat16 starts."""
    result = run_cli("plan", "--model", model, "--p-tp", "1", "--d-tp", "1", "--dtype", "float32", "--format", "json")
    document = json.loads(result.stdout)
    jsonschema.validate(document, document_schema("plan"))
    verdict = document["vllm"]
    assert result.code == 0 and not verdict["accepts"], verdict
    refusal = verdict["refusals"][0]
    assert refusal["code"] == "attention-backend"
    assert refusal["message"].startswith("vLLM starts neither engine with --dtype float32: \"No valid attention "
                                         "backend found for cuda with AttentionSelectorConfig(head_size=")
    assert "dtype=torch.float32" in refusal["message"] and "dtype not supported" in refusal["message"]
    shown = run_cli("plan", "--model", model, "--p-tp", "1", "--d-tp", "1", "--dtype", "float32")
    assert " ".join(shown.stdout.split()).startswith("vLLM 0.34 refuses this pairing at start-up: vLLM starts "
                                                     "neither engine with --dtype float32")
    assert run_cli("check", "--model", model, "--pairs", "1:1", "--dtype", "float32").code == 1
    assert run_cli("check", "--model", model, "--pairs", "1:1", "--dtype", "bfloat16").code == 0


def test_preflight_refuses_mla_under_float32_and_the_fix_is_bfloat16():
    """``get_attn_backend_cls`` stops each engine whose MLA layers run in float32 (exit 1); the fix
    sets --dtype bfloat16 on P and D alike (the hash compares the dtype), verified to work."""
    def line(role: str, dtype: str) -> str:
        transfer = json.dumps({"kv_connector": "NixlConnector", "kv_role": role})
        return (f"VLLM_SSM_CONV_STATE_LAYOUT=DS vllm serve moonshotai/Kimi-Linear-48B-A3B-Instruct -tp 2 "
                f"--dtype {dtype} --kv-transfer-config '{transfer}'")

    result = run_cli("preflight", "--prefill", line("kv_producer", "float32"), "--decode",
                     line("kv_consumer", "bfloat16"), "--format", "json")
    doc = json.loads(result.stdout)
    assert result.code == 1 and doc["verdict"] == "refused", doc["headline"]
    assert doc["headline"].startswith("REFUSED: vLLM 0.34 does not start the prefill engine with --dtype float32: "
                                      "\"No valid "
                                      "attention backend found for cuda")
    assert "--dtype bfloat16" in doc["fix"]["prefill"] and "--dtype bfloat16" in doc["fix"]["decode"]
    again = run_cli("preflight", "--prefill", doc["fix"]["prefill"], "--decode", doc["fix"]["decode"])
    assert again.code == 0, again.stdout[-2000:]


@pytest.mark.parametrize("arch, model_type, later", [
    ("BambaForCausalLM", "bamba", "does not dispatch through the Transformers attention interface"),
    ("Lfm2ForCausalLM", "lfm2", "but its NIXL connector refuses its state"),
    ("KimiK31ForConditionalGeneration", "kimi_k3", "KV cache view cannot be partitioned into NIXL regions"),
])
def test_the_heads_check_comes_before_what_vllm_refuses_later(tmp_path, arch, model_type, later):
    """vLLM builds its config first: ``ModelConfig.__post_init__`` resolves the architecture (a removed
    one falls back to the Transformers backend under --model-impl auto), then
    ``VllmConfig.__post_init__`` calls ``ModelConfig.verify_with_parallel_config``, whose heads check
    stops a TP size that does not divide them. Building the model (the Transformers backend's
    layers) and the connector (its state, its KV-cache registration) come after: at TP 3 the
    first words are the heads check's, at TP 2 the later refusal's. (Either exits non-zero, with
    no traceback.)"""
    config = json.loads((FIXTURES / "ibm-ai-platform__Bamba-9B.partial.json").read_text())
    if model_type == "kimi_k3":
        config = json.loads((FIXTURES / "kimi-k3.1.example.json").read_text())
        config["text_config"] = {**config["text_config"], "num_attention_heads": 32}
    config = {**config, "architectures": [arch], "model_type": model_type, "num_attention_heads": 32}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    heads = ("vLLM does not start a TP-3 engine: \"Total number of attention heads (32) must be divisible by tensor "
             "parallel size (3).\" (ModelConfig.verify_with_parallel_config)")

    def said(result) -> str:
        assert result.code in (1, 2) and "Traceback" not in result.stdout + result.stderr, result.stderr
        return " ".join((result.stdout + result.stderr).split())

    at_3 = said(run_cli("plan", "--model", str(path), "--p-tp", "1", "--d-tp", "3", "--vllm-version", "0.34"))
    assert heads in at_3 and later not in at_3
    at_2 = said(run_cli("plan", "--model", str(path), "--p-tp", "1", "--d-tp", "2", "--vllm-version", "0.34"))
    assert later in at_2 and "Total number of attention heads" not in at_2
    line = f"VLLM_SSM_CONV_STATE_LAYOUT=DS vllm serve {path} -tp {{}} --kv-transfer-config '{{}}'"
    p = line.format(3, json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_producer"}))
    d = line.format(2, json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}))
    preflight = said(run_cli("preflight", "--prefill", p, "--decode", d))
    assert heads in preflight and later not in preflight
