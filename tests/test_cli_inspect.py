"""The `inspect` and `models` commands end to end: every bad input is one red line and exit 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_run import messages
import yaml

from mambaxfer_cli.cli import flushed, run as run_command

TESTS = Path(__file__).parent
HF = TESTS / "fixtures" / "hf-configs"
EXAMPLES = TESTS.parent / "examples" / "models"


@pytest.fixture
def cli(monkeypatch, capsys):
    """Run ``mambaxfer ARGS`` in-process as the entry point does; return (exit code, stdout, stderr)."""
    def run(*args: str) -> tuple[int, str, str]:
        code = flushed(run_command(list(args)))
        out, err = capsys.readouterr()
        return code, out, err
    return run


@pytest.fixture
def fails(cli):
    """Assert a user error: exit 2, exactly one line on stderr holding ``message``, nothing else."""
    def check(message: str, *args: str) -> str:
        code, out, err = cli(*args)
        assert code == 2, (out, err)
        assert out == ""
        assert "Traceback" not in err
        assert err.startswith("error: ") and err.endswith("\n") and len(messages(err.strip())) == 1, err
        err = " ".join(err.split())      # the message as one line (it wraps between words at 80)
        assert message in err, err
        return err
    return check


@pytest.fixture
def refused(cli):
    """Assert the engine's refusal: exit 1 (a verdict, not a usage error), one line holding ``message``."""
    def check(message: str, *args: str) -> None:
        code, out, err = cli(*args)
        assert (code, out) == (1, ""), (code, out, err)
        assert err.startswith("error: ") and len(messages(err.strip())) == 1, err
        assert message in " ".join(err.split()), err
    return check


def inspect_json(cli, *args: str) -> dict:
    code, out, err = cli("inspect", *args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def write_config(tmp_path: Path, config: dict, name: str = "config.json") -> str:
    """Write ``config``; one that names no attention heads gets 4 (2 KV heads), as hybrids have."""
    if "num_attention_heads" not in config and "num_key_value_heads" not in config:
        config = {**config, "num_attention_heads": 4, "num_key_value_heads": 2}
    if not any(k in config for k in ("head_dim", "attention_head_dim", "hidden_size")):
        config = {**config, "head_dim": 16}
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


JAMBA_SMALL = {"model_type": "jamba", "hidden_size": 64, "mamba_expand": 2, "mamba_d_state": 16,
               "mamba_d_conv": 4, "num_hidden_layers": 8, "attn_layer_period": 4, "attn_layer_offset": 1}


# ---- bad inputs ---------------------------------------------------------------------------------

def test_missing_file(fails, tmp_path):
    fails(f"error: {tmp_path}/nope.json: no such file or directory",
          "inspect", "--model", str(tmp_path / "nope.json"))


def test_directory_without_config(fails, tmp_path):
    fails(f"{tmp_path}: directory holds no config.json", "inspect", "--model", str(tmp_path))


def test_invalid_json(fails, tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "jamba",\n  "hidden_size": }')
    fails(f"{path}: invalid JSON at line 2 column 18: Expecting value", "inspect", "--model", str(path))


def test_missing_key(fails, tmp_path):
    config = dict(JAMBA_SMALL)
    del config["mamba_d_state"]
    path = write_config(tmp_path, config)
    fails(f"{path}: missing key for d_state: expected mamba_d_state", "inspect", "-m", path)


def test_unknown_preset_did_you_mean(fails):
    err = fails("unknown model 'granite-tiny'; did you mean 'granite-4.0-h-tiny'?",
                "inspect", "--model", "granite-tiny")
    assert "built-in presets:" in err


@pytest.mark.parametrize("config, message", [
    ({"model_type": "minimax", "hidden_size": 2304, "num_hidden_layers": 27},
     "model_type 'minimax' is a lightning attention (MiniMax) model"),
    ({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
      "num_key_value_heads": 8},
     "not a Mamba-family config (model_type 'llama', and none of the SSM keys"),
], ids=["minimax", "llama"])
def test_unsupported_variants(fails, tmp_path, config, message):
    err = fails(message, "inspect", "--model", write_config(tmp_path, config))
    assert "mamba1: jamba, mamba, falcon_mamba; mamba2: mamba2, nemotron_h" in err   # what is supported


def test_a_short_conv_model_is_sglang_s_to_answer_for(fails, cli, tmp_path):
    config = {"model_type": "lfm2", "hidden_size": 1024, "num_hidden_layers": 4, "conv_L_cache": 3,
              "layer_types": ["conv", "conv", "full_attention", "conv"], "num_attention_heads": 16,
              "num_key_value_heads": 8}
    path = write_config(tmp_path, config)
    fails("model_type 'lfm2' is a short-conv state, which vLLM's NIXL connector refuses (derive_mamba_conv_split); "
          "mambaxfer answers for it under --engine sglang", "inspect", "--model", path)
    code, out, err = cli("inspect", "--engine", "sglang", "--model", path, "--tp", "2")
    assert code == 0, err
    assert "conv state 512 × 2 (bfloat16); temporal 1 × 1024 × 0" in " ".join(out.split())


@pytest.mark.parametrize("tp, message", [
    ("0", "--tp: TP sizes must be positive integers, got 0"),
    ("-2", "--tp: TP sizes must be positive integers, got -2"),
    ("1,a", "--tp: 'a' is not an integer; write e.g. --tp 1,2,4,8"),
    ("", "--tp: give at least one TP size"),
])
def test_bad_tp_list(fails, tp, message):
    fails(message, "inspect", "--model", "granite-4.0-h-tiny", "--tp", tp)


def test_a_tp_size_vllm_does_not_start_is_its_refusal(refused):
    refused("vLLM does not start a TP-5 engine of granite-4.0-h-tiny: 12 attention heads do not divide by TP 5 "
            "(ModelConfig.verify_with_parallel_config); TP sizes that work: 1, 2, 4, 12",
            "inspect", "--model", "granite-4.0-h-tiny", "--tp", "1,5")


def test_tp_not_dividing_heads(refused):
    # vLLM's start-up check (8 attention heads) comes before the layout's (16 K heads)
    refused("vLLM does not start a TP-32 engine of qwen3.5-0.8b: 8 attention heads do not divide by TP 32 "
          "(ModelConfig.verify_with_parallel_config); TP sizes that work: 1, 2, 4, 8",
          "inspect", "-m", "qwen3.5-0.8b", "--tp", "4,32")


def test_non_dividing_groups(refused):
    refused("TP 16 does not divide n_groups = 8, and vLLM replicates B/C groups only when n_groups == 1",
          "inspect", "-m", "mamba-codestral-7b", "--tp", "16")


@pytest.mark.parametrize("flag", ["--conv-dtype", "--ssm-dtype"])
def test_bad_dtype(fails, flag):
    fails("invalid choice 'int7' (choose from auto, bfloat16, float16, float32)", "inspect", "-m", "jamba", flag,
          "int7")


def test_bad_num_spec(fails):
    fails("--num-spec must be >= 0, got -1", "inspect", "-m", "jamba", "--num-spec", "-1")
    fails("--num-spec 1000000 is larger than any speculative decoding uses; at most 128",
          "inspect", "-m", "granite-4.0-h-tiny", "--num-spec", "1000000")


def test_yaml_without_config(fails, tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("name: no-config\nsource: nowhere\n")
    fails(f"{path}: a model YAML file needs a 'config:' mapping of Hugging Face config keys",
          "inspect", "-m", str(path))


def test_repo_not_in_cache(fails, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    fails(f"'ai21labs/Jamba-v9' is not in the local Hugging Face cache ({tmp_path}) nor a built-in preset's "
          f"source; mambaxfer never downloads", "inspect", "-m", "ai21labs/Jamba-v9")


def test_variant_forced_onto_the_wrong_config(fails):
    fails("missing key for n_groups: expected mamba_n_groups", "inspect", "-m", "jamba", "--variant", "mamba2")


@pytest.mark.parametrize("args, message", [
    (("--variant", "mamba3"), "'mamba3' is not one of 'mamba1', 'mamba2', 'gdn'"),
    (("--num-spec", "x"), "Invalid value for '--num-spec'"),
    (("--format", "xml"), "Invalid value for '--format' / '-f': 'xml' is not one of 'table', 'json', 'yaml'"),
])
def test_option_parse_errors_exit_2(cli, args, message):
    # Click's own usage errors: exit 2 and a usage box, no traceback.
    code, out, err = cli("inspect", "-m", "jamba", *args)
    assert code == 2 and "Traceback" not in err
    assert message in " ".join(err.replace("│", " ").split())


def test_console_script_prints_one_line_and_no_traceback(tmp_path):
    """The real entry point, in a subprocess: what a user sees."""
    proc = subprocess.run([sys.executable, "-m", "mambaxfer_cli", "inspect", "--model", "jamab"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    presets = sorted(p.stem for p in (TESTS.parent / "mambaxfer_cli" / "presets").glob("*.yaml"))
    assert " ".join(proc.stderr.split()) == ("error: unknown model 'jamab'; did you mean 'jamba'? (built-in presets: "
                           f"{', '.join(presets)}; "
                           "or pass a config.json, a model directory, a YAML file or a cached repo id)")


# ---- happy paths --------------------------------------------------------------------------------

def test_config_json_file(cli, tmp_path):
    model_dir = tmp_path / "jamba-mini"
    model_dir.mkdir()
    shutil.copy(HF / "ai21labs__Jamba-v0.1.json", model_dir / "config.json")
    doc = inspect_json(cli, "--model", str(model_dir / "config.json"), "--tp", "1,4,8")
    assert doc["model"]["name"] == "jamba-mini"
    assert doc["model"]["variant"] == "mamba1"
    assert list(doc["layouts"]) == ["1", "4", "8"]
    # docs/reference.md §4: Jamba-Mini's x is 8192 / 2048 / 1024 channels at TP 1 / 4 / 8.
    for tp, channels in (("1", 8192), ("4", 2048), ("8", 1024)):
        assert [r["regions"][0]["shard"][1] - r["regions"][0]["shard"][0] for r in doc["layouts"][tp]] == \
            [channels] * int(tp)


def test_model_directory_example(cli):
    doc = inspect_json(cli, "--model", str(EXAMPLES / "granite-like"), "--tp", "2")
    assert doc["model"]["name"] == "granite-like"
    assert (doc["model"]["ssm_layers"], doc["model"]["attention_layers"]) == (6, 2)
    ranks = doc["layouts"]["2"]
    assert [r["regions"][1]["shard"] for r in ranks] == [[0, 64], [0, 64]]      # one group, replicated


def test_yaml_model_file_example(cli):
    doc = inspect_json(cli, "--model", str(EXAMPLES / "toy-mamba2.yaml"), "--tp", "4")
    assert doc["model"]["name"] == "toy-mamba2"
    # 4 groups of 16 states over 4 ranks: rank r holds B channels [16r, 16r + 16).
    assert [r["regions"][1]["shard"] for r in doc["layouts"]["4"]] == [[16 * r, 16 * r + 16] for r in range(4)]
    assert doc["layouts"]["4"][0]["conv_bytes"] == (64 + 16 + 16) * 3 * 2


def test_hf_cache(cli, tmp_path, monkeypatch):
    snap = tmp_path / "models--ai21labs--Jamba-v0.1" / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    shutil.copy(HF / "ai21labs__Jamba-v0.1.json", snap / "config.json")
    (tmp_path / "models--ai21labs--Jamba-v0.1" / "refs").mkdir()
    (tmp_path / "models--ai21labs--Jamba-v0.1" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    doc = inspect_json(cli, "--model", "ai21labs/Jamba-v0.1", "--tp", "2")
    assert (doc["model"]["name"], doc["model"]["source"]) == ("ai21labs/Jamba-v0.1", "ai21labs/Jamba-v0.1")
    assert doc["layouts"]["2"][1]["regions"][0]["shard"] == [4096, 8192]


def test_nested_text_config(cli):
    doc = inspect_json(cli, "--model", str(HF / "Qwen__Qwen3.5-0.8B.partial.json"), "--tp", "4")
    assert doc["model"]["variant"] == "gdn" and doc["model"]["ssm_dtype"] == "float32"
    assert [r["name"] for r in doc["layouts"]["4"][0]["regions"]] == ["Q", "K", "V", "ssm"]
    assert [r["size"] // r["unit_bytes"] for r in doc["layouts"]["4"][0]["regions"]] == [512, 512, 512, 4]


def test_infinity_in_codestral(cli):
    doc = inspect_json(cli, "--model", str(HF / "mistralai__Mamba-Codestral-7B-v0.1.json"))
    assert doc["model"]["params"]["n_groups"] == 8


LAYER_CONFIGS = [
    ("layers_block_type",
     {"model_type": "zamba2", "hidden_size": 64, "mamba_expand": 2, "mamba_d_state": 16, "mamba_ngroups": 1,
      "n_mamba_heads": 4, "mamba_headdim": 32, "mamba_d_conv": 4, "num_hidden_layers": 4,
      "layers_block_type": ["mamba", "hybrid", "mamba", "mamba"]}, 4, 1),
    ("attn_layer_period/offset", JAMBA_SMALL, 6, 2),
    ("hybrid_override_pattern",
     {"model_type": "nemotron_h", "mamba_num_heads": 4, "mamba_head_dim": 16, "ssm_state_size": 16,
      "n_groups": 2, "conv_kernel": 4, "hybrid_override_pattern": "M-M*-M-M*-M"}, 5, 2),
    ("layer_types",
     {"model_type": "granitemoehybrid", "hidden_size": 64, "mamba_expand": 2, "mamba_d_state": 16,
      "mamba_n_groups": 1, "mamba_n_heads": 4, "mamba_d_head": 32, "mamba_d_conv": 4,
      "layer_types": ["attention", "mamba", "mamba"]}, 2, 1),
    ("attn_layer_indices",
     {"model_type": "bamba", "hidden_size": 64, "mamba_expand": 2, "mamba_d_state": 16, "mamba_n_groups": 1,
      "mamba_n_heads": 4, "mamba_d_head": 32, "mamba_d_conv": 4, "num_hidden_layers": 10,
      "attn_layer_indices": [3, 7]}, 8, 2),
    ("full_attention_interval",
     {"model_type": "qwen3_next", "linear_num_key_heads": 2, "linear_num_value_heads": 4,
      "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4,
      "num_hidden_layers": 12, "full_attention_interval": 4}, 9, 3),
]


@pytest.mark.parametrize("key, config, ssm, attention", LAYER_CONFIGS, ids=[c[0] for c in LAYER_CONFIGS])
def test_every_layer_kind_key(cli, tmp_path, key, config, ssm, attention):
    doc = inspect_json(cli, "--model", write_config(tmp_path, config))
    assert (doc["model"]["ssm_layers"], doc["model"]["attention_layers"]) == (ssm, attention)


def test_overrides(cli, tmp_path):
    doc = inspect_json(cli, "-m", "nemotron-h-8b", "--conv-dtype", "float32", "--ssm-dtype", "bfloat16",
                       "--num-spec", "2", "--tp", "2")
    model = doc["model"]
    assert (model["conv_dtype"], model["ssm_dtype"], model["num_spec"]) == ("float32", "bfloat16", 2)
    rank = doc["layouts"]["2"][0]
    assert rank["conv_rows"] == 3 + 2
    assert [r["unit_bytes"] for r in rank["regions"]] == [5 * 4, 5 * 4, 5 * 4, 64 * 128 * 2]
    # --variant: a config whose model_type is unknown and whose keys would not be detected.
    config = {"model_type": "custom", "hidden_size": 64, "expand": 2, "d_state": 8, "d_conv": 4,
              "num_layers": 3}
    doc = inspect_json(cli, "-m", write_config(tmp_path, config), "--variant", "mamba1")
    assert doc["model"]["variant"] == "mamba1"
    assert doc["model"]["params"] == {"intermediate_size": 128, "d_state": 8}


def test_granite_tp4_b_and_c_replicated(cli):
    doc = inspect_json(cli, "--model", "granite-4.0-h-tiny", "--tp", "4")
    ranks = doc["layouts"]["4"]
    assert len(ranks) == 4
    for name in ("B", "C"):
        shards = [next(r for r in rank["regions"] if r["name"] == name)["shard"] for rank in ranks]
        assert shards == [[0, 128]] * 4          # the same single group (128 states) on every rank
    xs = [next(r for r in rank["regions"] if r["name"] == "x")["shard"] for rank in ranks]
    assert xs == [[0, 768], [768, 1536], [1536, 2304], [2304, 3072]]


def test_json_document_shape(cli):
    doc = inspect_json(cli, "-m", "jamba", "--tp", "2", "--vllm-version", "0.33")
    assert set(doc) == {"schema", "producer", "vllm_version", "gpu", "model", "layouts", "engines"}
    assert (doc["schema"], doc["vllm_version"], doc["gpu"]) == ("mambaxfer.inspect/v1", "0.33", "H100")
    assert set(doc["model"]) == {"name", "source", "variant", "ssm_layers", "attention_layers", "conv_kernel",
                                 "num_spec", "conv_dtype", "ssm_dtype", "params", "attention", "origin"}
    # Jamba at TP 2: 4 KV heads of 128 in bf16 (2048 B a token); a 155648-byte state needs 80 tokens
    # from vLLM 0.33's 16 (16·ceil(4.75)), 128 from 0.34's 64 (64·ceil(1.19)).
    assert doc["engines"]["2"] == {"attention_backend": "FLASH_ATTN", "kv_cache_dtype": "auto",
                                   "prefix_caching": True, "block_size": 80, "kernel_block_size": 80,
                                   "blocks_per_logical": 1, "attention_bytes_per_token": 2048,
                                   "state_bytes": 155648, "page_bytes": 163840, "num_blocks": 100000,
                                   "vllm_derived": True, "vllm_version": "0.33", "gpu": "H100",
                                   "gdn_prefill_backend": None, "checkpoint_alignment": 1, "split_by_remote": 1}
    newer = inspect_json(cli, "-m", "jamba", "--tp", "2", "--vllm-version", "0.34")["engines"]["2"]
    assert (newer["block_size"], newer["page_bytes"], newer["vllm_version"]) == (128, 262144, "0.34")
    rank = doc["layouts"]["2"][1]
    assert set(rank) == {"rank", "conv_rows", "conv_bytes", "ssm_bytes", "regions"}
    assert rank["regions"][1] == {"name": "ssm", "kind": "ssm", "unit": "channel", "unit_bytes": 32,
                                  "shard": [4096, 8192], "offset": 24576, "size": 131072}


def test_yaml_format_matches_json(cli):
    code, out, _ = cli("inspect", "-m", "qwen3.5-0.8b", "--tp", "1,2", "--format", "yaml")
    assert code == 0
    assert yaml.safe_load(out) == inspect_json(cli, "-m", "qwen3.5-0.8b", "--tp", "1,2")


def test_table_output(cli):
    code, out, err = cli("inspect", "-m", "granite-4.0-h-tiny", "--tp", "1,4")
    assert code == 0 and err == ""
    assert "TP 1" in out and "TP 4" in out
    assert "[2304, 3072)" in out and "rep" in out


def test_help_lists_every_option(cli):
    code, out, _ = cli("inspect", "--help")
    assert code == 0
    for option in ("--model", "--tp", "--format", "--variant", "--conv-dtype", "--ssm-dtype", "--num-spec"):
        assert option in out
    code, out, _ = cli("--help")
    assert code == 0 and "inspect" in out and "models" in out


def test_models_lists_every_preset(cli):
    code, out, err = cli("models", "--format", "json")
    assert code == 0, err
    rows = {row["name"]: row for row in json.loads(out)["models"]}
    assert {"jamba", "mamba-130m", "mamba-codestral-7b", "nemotron-h-8b", "granite-4.0-h-tiny",
            "qwen3.5-0.8b", "qwen3-next-80b"} <= set(rows)
    assert (rows["jamba"]["variant"], rows["jamba"]["ssm_layers"], rows["jamba"]["attention_layers"]) == \
        ("mamba1", 28, 4)
    assert rows["nemotron-h-8b"]["ssm_dtype"] == "float32"
    assert rows["jamba"]["source"] == "ai21labs/Jamba-v0.1"
