"""--speculative-config on vLLM's side: the MTP layers vLLM's drafter builds from the target's own
checkpoint join the target's KV-cache groups, so the tensors, descriptor IDs and reads include
them (docs/reference.md, section 4, "Draft layers"); vLLM's refusals of the settings, in its words."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from cli_run import assert_user_error, run_cli
from dataclasses import replace
from mambaxfer_cli.engines.vllm.families import qwen4exp
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.schema import document_schema

VALIDATOR = jsonschema.Draft202012Validator(document_schema("plan"))
FIXTURE = Path(__file__).parent / "fixtures" / "hf-configs" / "Qwen__Qwen3.5-0.8B.partial.json"
RELEASES = ("0.33", "0.34")


def mtp(tokens: int | None = 1, **extra) -> str:
    config = {"method": "mtp", **({} if tokens is None else {"num_speculative_tokens": tokens}), **extra}
    return json.dumps(config)


def plan(model: str, *extra: str) -> dict:
    result = run_cli("plan", "--model", model, "--p-tp", "1", "--d-tp", "2", "--semantics", "vllm",
                     "--format", "json", *extra)
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    VALIDATOR.validate(document)
    return document


def attention_ids(document: dict) -> list[int]:
    """D0's local attention IDs: the last of each read's IDs, one per attention tensor."""
    read = document["descriptors"]["reads"][0]
    groups = document["descriptors"]["group_tensors"]
    return read["local_ids"][-groups[-1]:]


@pytest.mark.parametrize("release", RELEASES)
def test_qwen35_mtp_layer_joins_the_attention_group(release):
    """Qwen3.5-0.8B: 18 GDN + 6 attention layers; its MTP layer (mtp_num_hidden_layers 1) is a 7th
    attention layer, so the group size and the tensors are 7, not 6, and SSM IDs start at 7·N."""
    before = plan("qwen3.5-0.8b", "--vllm-version", release)
    after = plan("qwen3.5-0.8b", "--vllm-version", release, "--speculative-config", mtp(1))
    assert before["descriptors"]["decode"]["tensors"] == 6
    assert after["descriptors"]["groups"] == ["ssm", "ssm", "ssm", "attention"]
    assert after["descriptors"]["group_tensors"] == [6, 6, 6, 7]
    side = after["descriptors"]["decode"]
    assert (side["tensors"], side["ssm_tensors"]) == (7, 6)
    assert side["attention_descs"] == 7 * side["num_blocks"]
    n = side["num_blocks"]
    ids = attention_ids(after)
    block = after["descriptors"]["request"]["decode_blocks"][-1][0]
    assert ids == [t * n + block for t in range(7)]          # the 7th, t = 6, is the draft layer's
    assert min(i for i in after["descriptors"]["reads"][0]["local_ids"] if i not in ids) >= 7 * n
    assert after["model"]["draft_layers"] == 1 and after["model"]["attention_layers"] == 7
    assert after["model"]["num_spec"] == 1
    assert "draft-layers" not in [w["code"] for w in after["warnings"]]


@pytest.mark.parametrize("release", RELEASES)
def test_qwen3_next_builds_one_mtp_layer_by_default(release):
    """Qwen3-Next's released config has no num_nextn_predict_layers: vLLM's drafter builds 1 layer
    (its default) and checks no token count against it (n_predict is None)."""
    document = plan("qwen3-next-80b", "--vllm-version", release, "--speculative-config", mtp(3))
    assert document["descriptors"]["decode"]["tensors"] == 13      # 12 attention layers + 1
    assert document["descriptors"]["group_tensors"] == [12, 12, 12, 13]
    assert document["model"]["draft_layers"] == 1 and document["model"]["num_spec"] == 3


def test_show_ids_prints_the_groups_with_the_draft_layer():
    result = run_cli("plan", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2", "--semantics", "vllm",
                     "--show", "ids", "--speculative-config", mtp(1))
    assert result.code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert "KV-cache groups ssm*3,attention · 7 tensors (6 with SSM layers)" in text
    assert "7 attention layers" in text and "draft-layers" not in text


@pytest.fixture
def two_mtp_layers(tmp_path: Path) -> Path:
    """The Qwen3.5-0.8B config with mtp_num_hidden_layers 2: a rule test of n_predict > 1."""
    config = json.loads(FIXTURE.read_text())
    config["text_config"]["mtp_num_hidden_layers"] = 2
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("release", RELEASES)
def test_n_predict_layers_whatever_the_token_count(two_mtp_layers, release):
    """vLLM builds n_predict layers whatever num_speculative_tokens (a multiple reuses them)."""
    for tokens in (1, 4):
        document = plan(str(two_mtp_layers), "--vllm-version", release, "--speculative-config", mtp(tokens))
        assert document["model"]["draft_layers"] == 2 and document["model"]["attention_layers"] == 8


@pytest.mark.parametrize("release, where", [("0.33", "SpeculativeConfig.__post_init__"),
                                            ("0.34", "SpeculatorConfig.resolve_num_speculative_tokens")])
def test_a_count_neither_within_nor_a_multiple_is_refused(two_mtp_layers, release, where):
    result = run_cli("plan", "--model", str(two_mtp_layers), "--p-tp", "1", "--d-tp", "2", "--vllm-version",
                     release, "--speculative-config", mtp(3))
    assert result.code == 1, (result.code, result.stderr)
    text = " ".join(result.stderr.split())
    assert '"num_speculative_tokens:3 must be divisible by n_predict=2"' in text and where in text
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["plan", "inspect", "check"])
def test_mtp_without_a_token_count_is_refused(command):
    args = {"plan": ("--p-tp", "1", "--d-tp", "2"), "inspect": (), "check": ("--pairs", "1:2")}[command]
    result = run_cli(command, "--model", "qwen3.5-0.8b", *args, "--speculative-config", mtp(None))
    assert result.code == 1, (result.code, result.stderr)
    assert "num_speculative_tokens must be provided with speculative model" in " ".join(result.stderr.split())


def test_a_count_of_zero_is_refused_as_pydantic_says():
    result = run_cli("plan", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2",
                     "--speculative-config", mtp(0))
    assert result.code == 1, (result.code, result.stderr)
    assert "Input should be greater than 0" in " ".join(result.stderr.split())


@pytest.mark.parametrize("value, fragment", [
    ("{method: mtp}", "--speculative-config is not valid JSON"),
    ("[1]", "--speculative-config must be a JSON object"),
    ('{"method":"mtp","num_speculative_tokens":"two"}', "num_speculative_tokens must be an integer"),
])
def test_json_we_cannot_read_is_a_usage_error(value, fragment):
    assert_user_error(run_cli("plan", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2",
                              "--speculative-config", value), fragment)


def test_num_spec_must_agree():
    assert_user_error(run_cli("plan", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2", "--num-spec", "2",
                              "--speculative-config", mtp(1)), "--num-spec 2 and --speculative-config's")


def test_drafters_not_modelled_keep_the_warning_and_ngram_has_none():
    eagle = plan("qwen3.5-0.8b", "--speculative-config", '{"method":"eagle3","model":"d","num_speculative_tokens":2}')
    assert "draft-layers" in [w["code"] for w in eagle["warnings"]]
    assert eagle["model"]["num_spec"] == 2 and "draft_layers" not in eagle["model"]
    ngram = plan("qwen3.5-0.8b", "--speculative-config", '{"method":"ngram","num_speculative_tokens":2}')
    assert "draft-layers" not in [w["code"] for w in ngram["warnings"]]
    assert ngram["descriptors"]["decode"]["tensors"] == 6


def test_inspect_and_check_hold_the_draft_layer():
    result = run_cli("inspect", "--model", "qwen3.5-0.8b", "--tp", "2", "--format", "json",
                     "--speculative-config", mtp(1))
    assert result.code == 0, result.stderr
    model = json.loads(result.stdout)["model"]
    assert (model["attention_layers"], model["draft_layers"]) == (7, 1)
    result = run_cli("check", "--model", "qwen3.5-0.8b", "--pairs", "1:2,2:1", "--format", "json",
                     "--speculative-config", mtp(2), timeout=300)
    assert result.code == 0, result.stderr


def test_check_proves_the_qwen4exp_draft_layers_attention_and_qsa_pages():
    """The draft QSA layer's attention page, raw-key ring and compressed keys are proved with the
    target's: check verifies exactly one indexed-attention layer's pages more than without it."""
    def checked(*extra: str) -> tuple[int, dict]:
        result = run_cli("check", "--model", "qwen3.8-flash-next", "--pairs", "1:1", "--format", "json", *extra,
                         timeout=300)
        assert result.code == 0, result.stderr
        (found,) = json.loads(result.stdout)["results"]
        assert found["verdict"] == "pass" and found["wrong_bytes"] == 0
        return found["bytes_verified"], plan("qwen3.8-flash-next", *extra)["engines"]["prefill"]   # TP 1
    alone, _ = checked("--num-spec", "1")
    drafted, engine = checked("--speculative-config", mtp(1))
    caches = qwen4exp.indexer_caches(replace(load_model("qwen3.8-flash-next"), num_spec=1))
    block = engine["block_size"]
    assert drafted - alone == (engine["attention_bytes_per_token"] * block + caches.ring_page_bytes
                               + caches.key_page_bytes(block))


def test_sglang_takes_no_speculative_config():
    assert_user_error(run_cli("plan", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2",
                              "--speculative-config", mtp(1)), "--speculative-config: vLLM's option")


SUPER = FIXTURE.with_name("nvidia__NVIDIA-Nemotron-3-Super-120B-A12B-BF16.partial.json")


@pytest.mark.parametrize("release", RELEASES)
def test_nemotron_h_mtp_builds_one_attention_layer_per_star(release):
    """Nemotron-3-Super (40 Mamba2 + 8 attention layers, mtp_hybrid_override_pattern "*E"): vLLM's
    NemotronHMultiTokenPredictor builds an attention layer for "*" and an MoE layer for "E", so
    the attention group holds 9 layers and there are 9 tensors, 8 of them with SSM layers."""
    before = plan(str(SUPER), "--vllm-version", release)
    after = plan(str(SUPER), "--vllm-version", release, "--speculative-config", mtp(2))
    assert before["descriptors"]["group_tensors"] == [8, 8, 8, 8, 8, 8]
    assert after["descriptors"]["group_tensors"] == [8, 8, 8, 8, 8, 9]
    side = after["descriptors"]["decode"]
    assert (side["tensors"], side["ssm_tensors"]) == (9, 8)
    assert after["model"]["draft_layers"] == 1 and after["model"]["attention_layers"] == 9


@pytest.fixture
def super_with(tmp_path: Path):
    def make(**keys) -> str:
        config = json.loads(SUPER.read_text())
        config.update(keys)
        path = tmp_path / "config.json"
        path.write_text(json.dumps(config))
        return str(path)
    return make


@pytest.mark.parametrize("keys, words", [
    ({"mtp_hybrid_override_pattern": "*E*E"}, None),
    ({"mtp_hybrid_override_pattern": None}, None),
    ({"num_nextn_predict_layers": 2}, "AssertionError: Only one MTP layer is supported for NemotronH-MTP"),
    ({"mtp_hybrid_override_pattern": "*M"}, "NotImplementedError: Pattern char 'M' in *M not implemented"),
])
def test_nemotron_h_mtp_pattern_rules(super_with, keys, words):
    """Two "*" make two draft layers; no pattern is transformers' default "*E"; vLLM's predictor
    asserts one step and builds only "*" and "E" (its words, exit 1)."""
    config = super_with(**{k: v for k, v in keys.items() if v is not None})
    if keys.get("mtp_hybrid_override_pattern", "") is None:
        data = json.loads(Path(config).read_text())
        data.pop("mtp_hybrid_override_pattern")
        Path(config).write_text(json.dumps(data))
    if words is None:
        stars = keys.get("mtp_hybrid_override_pattern") or "*E"
        document = plan(config, "--speculative-config", mtp(1))
        assert document["model"]["draft_layers"] == stars.count("*")
        return
    result = run_cli("plan", "--model", config, "--p-tp", "1", "--d-tp", "2", "--speculative-config", mtp(1))
    assert result.code == 1, (result.code, result.stderr)
    assert words in " ".join(result.stderr.split()) and "Traceback" not in result.stderr


# Nemotron-3-Ultra's released config.json gives its MTP layers as mtp_layers_block_type
# ["attention", "moe"] (legacy names) with no pattern key; transformers' NemotronHConfig makes that
# list the pattern vLLM's predictor reads (mtp_hybrid_override_pattern, a property of it).
@pytest.mark.parametrize("keys, layers", [
    ({"mtp_layers_block_type": ["attention", "moe"], "mtp_hybrid_override_pattern": None}, 1),
    ({"mtp_layers_block_type": ["attention", "attention", "moe"]}, 2),              # the list wins
    ({"mtp_layers_block_type": ["full_attention", "moe"], "mtp_hybrid_override_pattern": "*E*E"}, 2),
    ({"mtp_layers_block_type": ["mamba", "moe"]}, "NotImplementedError: Pattern char 'M' in ME not implemented"),
    ({"mtp_layers_block_type": ["attention", "sliding"]}, "contains invalid types: {'sliding'}"),
])
def test_nemotron_h_mtp_layers_block_type_is_the_pattern_where_given(super_with, keys, layers):
    """The list, legacy names remapped, is the pattern; the pattern key counts only beside the
    default list; what the predictor cannot build is refused in vLLM's (or transformers') words."""
    config = super_with(**{k: v for k, v in keys.items() if v is not None})
    if "mtp_hybrid_override_pattern" in keys and keys["mtp_hybrid_override_pattern"] is None:
        data = json.loads(Path(config).read_text())
        del data["mtp_hybrid_override_pattern"]
        Path(config).write_text(json.dumps(data))
    if isinstance(layers, int):
        for release in RELEASES:
            document = plan(config, "--vllm-version", release, "--speculative-config", mtp(1), "--show", "ids")
            assert document["model"]["draft_layers"] == layers
            assert document["model"]["attention_layers"] == 8 + layers
        return
    result = run_cli("plan", "--model", config, "--p-tp", "1", "--d-tp", "2", "--speculative-config", mtp(1))
    assert result.code == 1, (result.code, result.stderr)
    assert layers in " ".join(result.stderr.split()) and "Traceback" not in result.stderr


def test_nemotron_h_without_mtp_keys_keeps_the_warning(super_with):
    """num_nextn_predict_layers 0 is no MTP variant for vLLM (hf_config_override): not modelled."""
    document = plan(super_with(num_nextn_predict_layers=0), "--speculative-config", mtp(1))
    assert "draft_layers" not in document["model"]
    assert "draft-layers" in [w["code"] for w in document["warnings"]]


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("config", ['{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}',
                                    '{"method":"ngram_gpu","num_speculative_tokens":2}',
                                    '{"method":"suffix","num_speculative_tokens":4}',
                                    '{"model":"[ngram]","num_speculative_tokens":2}'])
def test_draftless_methods_plan_the_target_alone(config, release):
    """n-gram lookup and suffix decoding draft without a model: no layers join the groups, the
    tensors and IDs are the target's with the token count's conv rows, and no warning."""
    tokens = json.loads(config)["num_speculative_tokens"]
    target = plan("qwen3.5-0.8b", "--vllm-version", release, "--num-spec", str(tokens))
    document = plan("qwen3.5-0.8b", "--vllm-version", release, "--speculative-config", config)
    assert document["descriptors"] == target["descriptors"] and "draft_layers" not in document["model"]
    assert document["model"]["num_spec"] == tokens
    assert "draft-layers" not in [w["code"] for w in document["warnings"]]


KIMI_K3 = FIXTURE.with_name("kimi-k3.example.json")


@pytest.mark.parametrize("release", RELEASES)
def test_kimi_k3_mtp_layers_are_mla_and_zero_is_vllms_zero_division(tmp_path, release):
    """Kimi-K3 (top-level model_type kimi_k3, its text_config a kimi_linear): vLLM's drafter builds
    text_config.num_nextn_predict_layers MLA layers past the target's (KimiK3MultiTokenPredictor);
    the example config's 0 makes vLLM's token-count check divide by zero, as vLLM stops."""
    result = run_cli("plan", "--model", str(KIMI_K3), "--p-tp", "1", "--d-tp", "2", "--vllm-version", release,
                     "--speculative-config", mtp(1))
    assert result.code == 1, (result.code, result.stderr)
    assert '"ZeroDivisionError: integer modulo by zero"' in " ".join(result.stderr.split())
    config = json.loads(KIMI_K3.read_text())
    config["text_config"]["num_nextn_predict_layers"] = 1
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    document = plan(str(path), "--vllm-version", release, "--speculative-config", mtp(1))
    assert document["model"]["draft_layers"] == 1 and document["model"]["attention_layers"] == 17
    assert document["descriptors"]["group_tensors"] == [16, 16, 16, 17]


@pytest.mark.parametrize("release", RELEASES)
def test_glm_5_next_mtp_is_refused(release):
    """GLM-5-Next's config (transformers' Glm5NextTextConfig) defines no num_nextn_predict_layers,
    which vLLM's hf_config_override reads for MTP: AttributeError, as vLLM stops."""
    result = run_cli("plan", "--model", "glm-5-next", "--p-tp", "1", "--d-tp", "2", "--vllm-version", release,
                     "--speculative-config", mtp(1))
    assert result.code == 1, (result.code, result.stderr)
    assert "'Glm5NextTextConfig' object has no attribute 'num_nextn_predict_layers'" in " ".join(result.stderr.split())


@pytest.mark.parametrize("release", RELEASES)
def test_glm_5_next_mtp_layers_are_mla_layers_with_the_indexer_caches(release, tmp_path):
    """GLM-5-Next's config (the preset: transformers' Glm5NextTextConfig defaults; no checkpoint is
    public) with num_nextn_predict_layers 2: vLLM's Glm5NextMultiTokenPredictor builds two MLA layers
    after the 45 (is_mtp_layer: never KDA), each with the indexer's ring and keys, tagged is_draft,
    so the attention and ring groups hold 13 layers; no draft-layers warning."""
    config = dict(load_model("glm-5-next").hf_config)
    config["text_config"] = {**config["text_config"], "num_nextn_predict_layers": 2}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    sized = ("--vllm-version", release, "--block-size", "4608")
    before = plan(str(path), *sized, "--num-spec", "1")
    after = plan(str(path), *sized, "--speculative-config", mtp(1))
    assert before["model"]["attention_layers"] == 11 and before["descriptors"]["group_tensors"][-2:] == [11, 11]
    assert after["model"]["draft_layers"] == 2 and after["model"]["attention_layers"] == 13
    assert after["descriptors"]["group_tensors"][-2:] == [13, 13]
    codes = {w["code"]: w["message"] for w in after["warnings"]}
    assert "draft-layers" not in codes and "each of the 13 MLA layers" in codes["glm5next-indexer"]


@pytest.mark.parametrize("release", RELEASES)
def test_qwen4exp_mtp_layer_is_a_qsa_layer_after_the_targets(release):
    """Qwen3.8-Flash-Next (36 GDN + 12 indexed-attention layers, mtp_num_hidden_layers 1): vLLM's
    Qwen4ExpMultiTokenPredictor builds one more QSA layer, tagged is_draft, so it joins the ring and
    attention groups (13 tensors) and keeps a raw-key ring and compressed keys as the target's QSA
    layers do: three more NIXL regions (its ring, keys and attention pages) before the SSM slots'."""
    before = plan("qwen3.8-flash-next", "--vllm-version", release, "--num-spec", "1")
    after = plan("qwen3.8-flash-next", "--vllm-version", release, "--speculative-config", mtp(1))
    assert after["model"]["draft_layers"] == 1 and after["model"]["attention_layers"] == 13
    kinds = ["ssm"] * 3 + ["ple", "ring", "attention"]
    assert before["descriptors"]["groups"] == after["descriptors"]["groups"] == kinds
    assert before["descriptors"]["group_tensors"][4:] == [12, 12]
    assert after["descriptors"]["group_tensors"][4:] == [13, 13]
    n = after["descriptors"]["decode"]["num_blocks"]
    ssm_before, ssm_after = (d["descriptors"]["reads"][0]["local_ids"][:3 * 12 * 4] for d in (before, after))
    assert ssm_after == [i + 3 * n for i in ssm_before]
    codes = {w["code"]: w["message"] for w in after["warnings"]}
    assert "draft-layers" not in codes and "each of the 13 indexed-attention layers" in codes["qwen4exp-qsa"]


@pytest.mark.parametrize("release, method, words", [
    ("0.33", "medusa", "Input should be 'ngram', 'draft_model', 'suffix', 'custom_class', ..."),
    ("0.34", "mlp_speculator", "Unknown speculative method 'mlp_speculator'"),
    ("0.34", "custom_class", "(SpeculativeConfig._validate_method)"),
])
def test_a_method_vllm_does_not_know_is_refused_in_its_words(release, method, words):
    from cli_run import assert_refused

    assert_refused(run_cli("plan", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "1", "--vllm-version", release,
                           "--speculative-config", json.dumps({"method": method, "num_speculative_tokens": 2})),
                   words)


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("config", [{}, {"method": "draft_model"}, {"method": "eagle3"}, {"method": "dflash"}])
def test_a_drafter_method_without_its_model_is_refused_in_vllms_words(release, config):
    """As vLLM 0.33 and 0.34 say it when run: tokens for a method that drafts with a checkpoint of its
    own (no method is draft_model) but no model stop SpeculativeConfig."""
    from cli_run import assert_refused

    assert_refused(run_cli("plan", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "1", "--vllm-version", release,
                           "--speculative-config", json.dumps({**config, "num_speculative_tokens": 2})),
                   "num_speculative_tokens was provided but without speculative model.")


@pytest.mark.parametrize("release", RELEASES)
def test_the_speculative_methods_are_vllms(release):
    """Every name of vLLM's own SpeculativeMethod, and no other, is a method the release takes."""
    import os
    import subprocess

    from mambaxfer_cli.engines.vllm.releases import release as rules

    python = os.environ.get(f"MAMBAXFER_TEST_VLLM_{release.replace('.', '_')}", "")
    if not (python and Path(python).is_file()):
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but no vLLM {release}", pytrace=False)
        pytest.skip(f"no vLLM {release}")
    script = ("import json, typing\nfrom vllm.config.speculative import SpeculativeMethod as M\n"
              "flat = lambda t: [n for a in typing.get_args(t) for n in ([a] if isinstance(a, str) else flat(a))]\n"
              "print(json.dumps(flat(M)))")
    found = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=600)
    assert found.returncode == 0, found.stderr[-2000:]
    ours = rules(release)
    assert set(json.loads(found.stdout.splitlines()[-1])) == (
        set(ours.speculative_methods) | ours.mtp_methods | ours.family_mtp_methods())
