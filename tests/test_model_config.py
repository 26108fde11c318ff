"""model_config: HF config dict -> ModelSpec. Real configs from tests/fixtures/hf-configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.planning.model import ATTENTION, SSM, Variant
from mambaxfer_cli.readers.model_config import flatten_text_config, spec_from_config
from mambaxfer_cli.engines.vllm.startup import removed_refusal, startup

HF = Path(__file__).parent / "fixtures" / "hf-configs"
A, S = ATTENTION, SSM


def hf(name: str) -> dict:
    return json.loads((HF / name).read_text())


# The attention keys of a small hybrid config, where a test is not about them.
ATTENTION_KEYS = {"num_attention_heads": 4, "num_key_value_heads": 2}


def spec(config: dict, **overrides):
    """A spec of ``config``; a config that names no attention heads gets ATTENTION_KEYS."""
    if "num_attention_heads" not in config and "num_key_value_heads" not in config:
        config = {**config, **ATTENTION_KEYS}
    if not any(k in config for k in ("head_dim", "attention_head_dim", "hidden_size")):
        config = {**config, "head_dim": 16}
    return spec_from_config(config, name="t", source="t.json", **{"startup": startup(), **overrides})


# A small Jamba-shaped config the error tests mutate.
JAMBA_SMALL = {"model_type": "jamba", "hidden_size": 64, "mamba_expand": 2, "mamba_d_state": 16,
               "mamba_d_conv": 4, "num_hidden_layers": 8, "attn_layer_period": 4, "attn_layer_offset": 1}


@pytest.mark.parametrize("fixture, variant, params, conv_kernel, ssm_layers, attn_layers, conv_dt, ssm_dt", [
    ("ai21labs__Jamba-v0.1.json", Variant("mamba1"),
     {"intermediate_size": 8192, "d_state": 16}, 4, 28, 4, "bfloat16", "bfloat16"),
    # A float32 checkpoint runs in bfloat16 under vLLM's --dtype auto.
    ("state-spaces__mamba-130m-hf.json", Variant("mamba1"),
     {"intermediate_size": 1536, "d_state": 16}, 4, 24, 0, "bfloat16", "bfloat16"),
    ("mistralai__Mamba-Codestral-7B-v0.1.json", Variant("mamba2"),
     {"intermediate_size": 8192, "d_state": 128, "n_groups": 8, "num_heads": 128, "head_dim": 64},
     4, 64, 0, "bfloat16", "bfloat16"),
    # Nemotron-H: the temporal state defaults to float32.
    ("nvidia__Nemotron-H-8B-Base-8K.partial.json", Variant("mamba2"),
     {"intermediate_size": 8192, "d_state": 128, "n_groups": 8, "num_heads": 128, "head_dim": 64},
     4, 24, 4, "bfloat16", "float32"),
    # Granite's partial config has no torch_dtype: bfloat16 is the default.
    ("ibm-granite__granite-4.0-h-tiny.partial.json", Variant("mamba2"),
     {"intermediate_size": 3072, "d_state": 128, "n_groups": 1, "num_heads": 48, "head_dim": 64},
     4, 36, 4, "bfloat16", "bfloat16"),
    # Qwen3.5: everything under text_config; mamba_ssm_dtype float32.
    ("Qwen__Qwen3.5-0.8B.partial.json", Variant("gdn"),
     {"num_k_heads": 16, "num_v_heads": 16, "head_k_dim": 128, "head_v_dim": 128},
     4, 18, 6, "bfloat16", "float32"),
])
def test_real_configs(fixture, variant, params, conv_kernel, ssm_layers, attn_layers, conv_dt, ssm_dt):
    s = spec(hf(fixture))
    assert s.variant == variant
    assert dict(s.params) == params
    assert (s.conv_kernel, s.ssm_layers, s.attention_layers) == (conv_kernel, ssm_layers, attn_layers)
    assert (s.conv_dtype, s.ssm_dtype) == (conv_dt, ssm_dt)


def test_nemotron_intermediate_is_heads_times_head_dim():
    # expand * hidden_size is also 8192 in the 8B config; make them differ.
    raw = {**hf("nvidia__Nemotron-H-8B-Base-8K.partial.json"), "expand": 3}
    assert spec(raw).params["intermediate_size"] == 128 * 64


def test_jamba_attention_every_8th_from_4():
    s = spec(hf("ai21labs__Jamba-v0.1.json"))
    assert [i for i, k in enumerate(s.layers) if k == A] == [4, 12, 20, 28]
    assert s.num_kv_heads == 8


def test_nemotron_pattern_drops_mlp_layers():
    s = spec(hf("nvidia__Nemotron-H-8B-Base-8K.partial.json"))
    # 52 symbols: 24 M, 4 *, 24 -; '-' keeps no cache, so 28 cache layers remain.
    assert len(s.layers) == 28
    assert [i for i, k in enumerate(s.layers) if k == A] == [4, 10, 16, 22]


def test_qwen35_text_config_and_layer_types():
    raw = hf("Qwen__Qwen3.5-0.8B.partial.json")
    flat = flatten_text_config(raw)
    assert flat["model_type"] == "qwen3_5_text"           # the inner config wins
    assert "text_config" not in flat
    s = spec(raw)
    assert s.layers == (S, S, S, A) * 6
    assert s.num_kv_heads == 2


def test_codestral_infinity_is_harmless():
    raw = hf("mistralai__Mamba-Codestral-7B-v0.1.json")
    assert raw["time_step_limit"][1] == float("inf")      # the fixture really holds Infinity
    assert spec(raw).variant == Variant("mamba2")


def test_falcon_mamba_intermediate_size_beats_expand():
    s = spec({"model_type": "falcon_mamba", "hidden_size": 4096, "expand": 16, "intermediate_size": 8192,
              "state_size": 16, "conv_kernel": 4, "num_hidden_layers": 64})
    assert s.params["intermediate_size"] == 8192
    assert s.layers == (S,) * 64


def test_falcon_h1_d_ssm_and_parallel_layers():
    base = {"model_type": "falcon_h1", "hidden_size": 1024, "mamba_expand": 2, "mamba_n_heads": 24,
            "mamba_d_head": 64, "mamba_n_groups": 1, "mamba_d_state": 128, "mamba_d_conv": 4,
            "num_hidden_layers": 3}
    assert spec({**base, "mamba_d_ssm": 1536}).params["intermediate_size"] == 1536
    without = spec(base)
    assert without.params["intermediate_size"] == 2048    # mamba_expand * hidden_size
    assert without.layers == (S, A) * 3                   # every layer has both mixers


LAYER_KEY_CASES = [
    ("layers_block_type (Zamba2)",
     {"model_type": "zamba2", "hidden_size": 64, "mamba_expand": 2, "mamba_d_state": 16, "mamba_ngroups": 1,
      "n_mamba_heads": 4, "mamba_headdim": 32, "mamba_d_conv": 4, "num_hidden_layers": 4,
      "layers_block_type": ["mamba", "hybrid", "mamba", "mamba"]},
     (S, A, S, S, S)),
    ("attn_layer_period/offset (Jamba)", JAMBA_SMALL, (S, A, S, S, S, A, S, S)),
    ("hybrid_override_pattern (Nemotron-H)",
     {"model_type": "nemotron_h", "mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 16,
      "n_groups": 2, "conv_kernel": 4, "num_hidden_layers": 6, "hybrid_override_pattern": "M-*EM-"},
     (S, A, S)),
    ("layer_types (Granite-4.0-H)",
     {"model_type": "granitemoehybrid", "hidden_size": 64, "mamba_expand": 2, "mamba_d_state": 16,
      "mamba_n_groups": 1, "mamba_n_heads": 4, "mamba_d_head": 32, "mamba_d_conv": 4,
      "num_hidden_layers": 3, "layer_types": ["attention", "mamba", "mamba"]},
     (A, S, S)),
    ("attn_layer_indices (Bamba)",
     {"model_type": "bamba", "hidden_size": 64, "mamba_expand": 2, "mamba_d_state": 16,
      "mamba_n_groups": 1, "mamba_n_heads": 4, "mamba_d_head": 32, "mamba_d_conv": 4,
      "num_hidden_layers": 6, "attn_layer_indices": [2, 5]},
     (S, S, A, S, S, A)),
    ("full_attention_interval (Qwen3-Next)",
     {"model_type": "qwen3_next", "linear_num_key_heads": 2, "linear_num_value_heads": 4,
      "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
      "num_hidden_layers": 8, "full_attention_interval": 4},
     (S, S, S, A, S, S, S, A)),
    ("no key (plain Mamba2)",
     {"model_type": "mamba2", "hidden_size": 64, "expand": 2, "num_heads": 4, "head_dim": 32, "n_groups": 1,
      "state_size": 16, "conv_kernel": 4, "num_hidden_layers": 3},
     (S, S, S)),
]


@pytest.mark.parametrize("label, config, layers", LAYER_KEY_CASES, ids=[c[0] for c in LAYER_KEY_CASES])
def test_every_layer_kind_key(label, config, layers):
    assert spec(config).layers == layers


def test_null_layer_key_counts_as_absent():
    # HF writes unset fields as null; a null layer_types must not hide attn_layer_period.
    assert spec({**JAMBA_SMALL, "layer_types": None}).layers == LAYER_KEY_CASES[1][2]


def test_overrides_beat_the_config():
    raw = hf("nvidia__Nemotron-H-8B-Base-8K.partial.json")
    s = spec(raw, conv_dtype="fp16", num_spec=2)
    assert (s.conv_dtype, s.ssm_dtype) == ("float16", "float32")   # Nemotron's own ssm default stays
    assert (s.num_spec, s.conv_rows) == (2, 3 + 2)
    s = spec(raw, ssm_dtype="torch.bfloat16")
    assert s.ssm_dtype == "bfloat16"


def test_ssm_dtype_follows_conv_dtype_when_model_says_nothing():
    s = spec(hf("ai21labs__Jamba-v0.1.json"), conv_dtype="float16")
    assert (s.conv_dtype, s.ssm_dtype) == ("float16", "float16")


def test_mamba1_conv_rows_ignore_num_spec():
    s = spec(hf("ai21labs__Jamba-v0.1.json"), num_spec=3)
    assert (s.num_spec, s.conv_rows) == (3, 3)


def test_num_speculative_tokens_from_config_and_override():
    raw = {**LAYER_KEY_CASES[-1][1], "num_speculative_tokens": 1}
    assert spec(raw).conv_rows == 4
    assert spec(raw, num_spec=0).conv_rows == 3


@pytest.mark.parametrize("name", ["bf16", "BFloat16", "torch.bfloat16", "bfloat16"])
def test_dtype_aliases(name):
    assert spec(JAMBA_SMALL, conv_dtype=name).conv_dtype == "bfloat16"


def test_variant_override_uses_generic_names():
    # An unknown model_type with Mamba2 keys under Granite's names.
    config = {"model_type": "my_hybrid", "hidden_size": 64, "mamba_expand": 2, "mamba_d_state": 16,
              "mamba_n_groups": 2, "mamba_n_heads": 4, "mamba_d_head": 32, "mamba_d_conv": 4,
              "num_hidden_layers": 2}
    s = spec(config, variant=Variant("mamba2"))
    assert s.variant == Variant("mamba2") and s.family == "generic Mamba2 (guessed)"
    assert dict(s.params) == {"intermediate_size": 128, "d_state": 16, "n_groups": 2, "num_heads": 4,
                              "head_dim": 32}
    assert spec(config).variant == Variant("mamba2")        # detected from mamba_n_groups as well


def test_variant_override_that_does_not_fit_names_the_missing_key():
    with pytest.raises(UserError, match="missing key for n_groups: expected mamba_n_groups or"):
        spec(JAMBA_SMALL, variant=Variant("mamba2"))


def test_gdn_detected_from_keys_without_known_model_type():
    config = {**LAYER_KEY_CASES[5][1], "model_type": "my_gdn"}
    assert spec(config).variant == Variant("gdn")


@pytest.mark.parametrize("model_type, found", [
    ("minimax", "lightning attention (MiniMax)"),
])
def test_unsupported_families(model_type, found):
    with pytest.raises(UserError) as err:
        spec({"model_type": model_type, "hidden_size": 64, "num_hidden_layers": 2})
    message = str(err.value)
    assert f"model_type '{model_type}' is a {found} model" in message
    assert "supported variants are Mamba1, Mamba2, GDN, KDA, short conv, lightning attention and CCA" in message


@pytest.mark.parametrize("variant", [None, Variant("short_conv")])
def test_a_short_conv_state_is_not_read_for_vllm(variant):
    # vLLM's connector refuses SHORT_CONV (derive_mamba_conv_split): its start-up hook says so; read
    # with no engine's rules (SGLang's hook has no such refusal), the state is read.
    config = {"model_type": "lfm2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "layer_types": ["conv", "full_attention"], "num_key_value_heads": 2, "conv_L_cache": 3}
    with pytest.raises(UserError, match="short-conv state, which vLLM's NIXL connector refuses"):
        spec(config, variant=variant)
    read = spec_from_config(config, name="lfm2", source="x", variant=variant)
    assert (read.variant, read.layers, read.params["hidden_size"]) == ("short_conv", ("ssm", "attention"), 64)


def test_plain_transformer_is_not_a_mamba_config():
    llama = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32}
    with pytest.raises(UserError, match=r"not a Mamba-family config \(model_type 'llama'.*use --variant"):
        spec(llama)


def test_missing_dimension_names_the_key():
    raw = hf("nvidia__Nemotron-H-8B-Base-8K.partial.json")
    del raw["ssm_state_size"]
    with pytest.raises(UserError, match="missing key for d_state: expected ssm_state_size"):
        spec(raw)


def test_missing_layer_count():
    raw = hf("state-spaces__mamba-130m-hf.json")
    del raw["n_layer"], raw["num_hidden_layers"]
    with pytest.raises(UserError, match="missing key for the layer count"):
        spec(raw)


@pytest.mark.parametrize("value", [0, -4, "8", 8.5, float("inf"), float("nan"), True])
def test_bad_dimension_values(value):
    with pytest.raises(UserError, match="key 'mamba_d_state' must be a positive integer"):
        spec({**JAMBA_SMALL, "mamba_d_state": value})


def test_integral_float_dimension_is_accepted():
    assert spec({**JAMBA_SMALL, "mamba_d_state": 16.0}).params["d_state"] == 16


@pytest.mark.parametrize("change, message", [
    ({"attn_layer_period": 0}, "key 'attn_layer_period' must be an integer >= 1, got 0"),
    ({"attn_layer_offset": "x"}, "key 'attn_layer_offset' must be an integer >= 0, got 'x'"),
    ({"full_attention_interval": 0, "attn_layer_period": None}, "key 'full_attention_interval' must be"),
    ({"layer_types": 5}, "key 'layer_types' must be a list of strings, got 5"),
    ({"layer_types": ["mamba", "conv"]}, "layer_types has unknown layer kind 'conv'"),
    ({"attn_layer_indices": "2,5", "attn_layer_period": None}, "key 'attn_layer_indices' must be a list of integers"),
    ({"hybrid_override_pattern": 7}, "key 'hybrid_override_pattern' must be a string"),
    ({"hybrid_override_pattern": "M-X"}, r"hybrid_override_pattern has unknown layer symbols \['X'\]"),
    ({"layer_types": ["attention", "attention"]}, "the layer-kind keys name no SSM layer"),
])
def test_malformed_layer_keys(change, message):
    with pytest.raises(UserError, match=message):
        spec({**JAMBA_SMALL, **change})


def test_bad_dtype_and_num_spec():
    with pytest.raises(UserError, match="unknown dtype 'int7'; known dtypes: float64, float32, bfloat16"):
        spec(JAMBA_SMALL, ssm_dtype="int7")
    with pytest.raises(UserError, match="--num-spec must be a non-negative integer, got -1"):
        spec(JAMBA_SMALL, num_spec=-1)


def test_spec_is_immutable_and_serialises():
    s = spec(hf("ai21labs__Jamba-v0.1.json"))
    with pytest.raises(TypeError):
        s.params["d_state"] = 1
    assert s.to_dict() == {
        "name": "t", "source": "t.json", "variant": "mamba1", "ssm_layers": 28, "attention_layers": 4,
        "conv_kernel": 4, "num_spec": 0, "conv_dtype": "bfloat16", "ssm_dtype": "bfloat16",
        "params": {"intermediate_size": 8192, "d_state": 16},
        "attention": {"num_kv_heads": 8, "head_size": 128, "dtype": "bfloat16"},
        "origin": {"conv_dtype": "config key torch_dtype", "ssm_dtype": "the conv dtype",
                   "model_dtype": "config key torch_dtype"}}


def test_hybrid_without_kv_heads_names_the_key():
    config = dict(JAMBA_SMALL)
    with pytest.raises(UserError, match="no KV-head count: expected num_key_value_heads or num_attention_heads"):
        spec_from_config(config, name="t", source="t.json")
    assert spec_from_config(config, name="t", source="t.json", kv_heads=2, head_size=16).num_kv_heads == 2


def test_hybrid_head_size_from_head_dim_else_hidden_over_heads():
    base = {**JAMBA_SMALL, "num_attention_heads": 4, "num_key_value_heads": 2}
    assert spec(base).head_size == 16                              # hidden_size 64 / 4 heads
    assert spec({**base, "head_dim": 32}).head_size == 32
    with pytest.raises(UserError, match="no head size"):
        spec({**base, "num_attention_heads": 3, "num_key_value_heads": 1})   # 64 / 3 is no head size
    with pytest.raises(UserError, match="key 'num_key_value_heads' must be a positive integer"):
        spec({**base, "num_key_value_heads": 0})


def test_bamba_is_refused_as_vllm_refuses_it():
    """vLLM's registry removed BambaForCausalLM in 0.23.0 (_PREVIOUSLY_SUPPORTED_MODELS, 0.33 and 0.34).
    Under --model-impl auto ``_ModelRegistry._try_resolve_transformers`` hands it to the Transformers
    backend (transformers has BambaForCausalLM and can set its attention), which keeps no Mamba layer:
    ``_create_attention_instances`` stops at layer 0, a Mamba layer (``layer_types``
    "linear_attention"). The refusal says so, never that it runs without Mamba state."""
    config = json.loads((Path(__file__).parent / "fixtures" / "hf-configs" /
                         "ibm-ai-platform__Bamba-9B.partial.json").read_text())
    with pytest.raises(UserError) as err:
        spec_from_config(config, name="bamba", source="ibm-ai-platform/Bamba-9B", startup=startup())
    said = str(err.value)
    assert said.startswith("ibm-ai-platform/Bamba-9B: vLLM 0.34's registry removed BambaForCausalLM (served until "
                           "v0.23.0); under --model-impl auto (the default) its Transformers backend takes it")
    assert ("\"Layer 0 (linear_attention) does not dispatch through the Transformers attention interface and vLLM "
            "has no other way to handle it.\" (_create_attention_instances)") in said
    assert ("with --model-impl vllm: \"Model architecture BambaForCausalLM was supported in vLLM until v0.23.0, "
            "and is not supported anymore\" (_ModelRegistry._raise_for_unsupported)") in said
    assert "no Mamba state" not in said
    served = dict(config, architectures=["GraniteMoeHybridForCausalLM"], model_type="granitemoehybrid")
    assert removed_refusal(served) is None


def test_the_core_reads_a_model_an_engine_refuses():
    # vLLM's start-up rules are its engine's hook: without one the reader says what the model is
    config = json.loads((Path(__file__).parent / "fixtures" / "hf-configs" /
                         "ibm-ai-platform__Bamba-9B.partial.json").read_text())
    assert "ssm" in spec_from_config(config, name="bamba", source="ibm-ai-platform/Bamba-9B").layers


@pytest.mark.parametrize("architectures", [-9223372036854775808, "GraniteMoeHybridForCausalLM", {"a": 1}, None])
def test_architectures_that_are_not_a_list_name_none(architectures):
    # a config may hold anything there (the fuzz test found an integer): no architecture, no traceback
    config = json.loads((Path(__file__).parent / "fixtures" / "hf-configs" /
                         "ibm-ai-platform__Bamba-9B.partial.json").read_text())
    config = dict(config, architectures=architectures, model_type="granitemoehybrid")
    assert removed_refusal(config) is None
    assert spec_from_config(config, name="granite", source="granite").family == "Granite-4.0-H / Bamba"


# --- the core reads the dtypes' facts; an engine's rule settles them (Startup.dtypes) ------------

def test_without_an_engine_the_model_keeps_its_config_dtypes():
    from mambaxfer_cli.readers.model_config import Startup

    plain = spec_from_config(hf("state-spaces__mamba-130m-hf.json"), name="m", source="m", startup=Startup())
    assert (plain.model_dtype, plain.conv_dtype, plain.checkpoint_dtype) == ("float32", "float32", "")
    assert plain.origin["model_dtype"] == "config key torch_dtype"
    qwen = spec_from_config(hf("Qwen__Qwen3.5-0.8B.partial.json"), name="q", source="q", startup=Startup())
    assert (qwen.ssm_dtype, qwen.origin["ssm_dtype"]) == ("float32", "config key mamba_ssm_dtype")


def test_each_engine_settles_a_float32_checkpoint_its_own_way():
    from mambaxfer_cli.engines.sglang.served import startup as sglang_startup
    from mambaxfer_cli.engines.sglang.shapes import sglang_model

    config = hf("state-spaces__mamba-130m-hf.json")
    vllm = spec_from_config(config, name="m", source="m", startup=startup())
    assert (vllm.model_dtype, vllm.checkpoint_dtype) == ("bfloat16", "float32")
    assert "vLLM's --dtype auto runs in bfloat16" in vllm.origin["model_dtype"]
    sglang = spec_from_config(config, name="m", source="m", startup=sglang_startup("0.5.23"))
    assert (sglang.model_dtype, sglang.checkpoint_dtype) == ("float32", "float32")
    assert sglang_model(sglang).model_dtype == "float16"      # SGLang's --dtype auto


def test_models_reads_the_presets_in_the_default_engines_dtypes(cli, monkeypatch):
    from mambaxfer_cli.readers import model_config

    monkeypatch.setattr(model_config, "NO_ENGINE", model_config.Startup())    # no test default
    code, out, _ = cli("models", "--format", "json")
    row = next(m for m in json.loads(out)["models"] if m["name"] == "mamba-130m")
    assert (code, row["conv_dtype"]) == (0, "bfloat16")      # vLLM's --dtype auto, named by `models`
