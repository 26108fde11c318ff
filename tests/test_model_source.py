"""model_source: resolving --model (presets, config.json, directories, YAML files, the HF cache)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.planning.model import Variant
from mambaxfer_cli.readers.model_config import spec_from_config
from mambaxfer_cli.readers.documents import parse_yaml
from mambaxfer_cli.readers.model_source import PRESET_DIR, compiled_presets, hf_cache_dir, load_model, preset_names

TESTS = Path(__file__).parent
HF = TESTS / "fixtures" / "hf-configs"
EXAMPLES = TESTS.parent / "examples" / "models"

REQUIRED_PRESETS = ["jamba", "mamba-130m", "mamba-codestral-7b", "nemotron-h-8b", "granite-4.0-h-tiny",
                    "qwen3.5-0.8b", "qwen3-next-80b"]


def test_required_presets_exist_and_load():
    assert set(REQUIRED_PRESETS) <= set(preset_names())
    for name in preset_names():
        spec = load_model(name)     # as no engine starts it (models)
        assert spec.name == name and spec.ssm_layers > 0


def test_compiled_presets_say_what_the_yaml_files_say():
    # Loading a preset reads compiled.json (no PyYAML at start-up); the YAML files are the source.
    compiled = compiled_presets()
    assert sorted(compiled) == preset_names()
    for name in preset_names():
        path = PRESET_DIR / f"{name}.yaml"
        assert json.dumps(compiled[name]) == json.dumps(parse_yaml(path.read_text(), str(path))), \
            f"{name}: compiled.json is stale; run python scripts/compile_presets.py"


@pytest.mark.parametrize("preset, fixture", [
    ("jamba", "ai21labs__Jamba-v0.1.json"),
    ("mamba-130m", "state-spaces__mamba-130m-hf.json"),
    ("mamba-codestral-7b", "mistralai__Mamba-Codestral-7B-v0.1.json"),
    ("nemotron-h-8b", "nvidia__Nemotron-H-8B-Base-8K.partial.json"),
    ("granite-4.0-h-tiny", "ibm-granite__granite-4.0-h-tiny.partial.json"),
    ("qwen3.5-0.8b", "Qwen__Qwen3.5-0.8B.partial.json"),
])
def test_presets_hold_the_real_config_values(preset, fixture):
    from_preset = load_model(preset)
    real = spec_from_config(json.loads((HF / fixture).read_text()), name=preset, source="")
    for field in ("variant", "params", "layers", "conv_kernel", "conv_dtype", "ssm_dtype", "num_kv_heads"):
        assert getattr(from_preset, field) == getattr(real, field), field


@pytest.mark.parametrize("preset, fixture", [
    ("jet-nemotron-2b", "NVlabs__Jet-Nemotron__jetlm_2B.json"),
    ("minicpm-sala", "openbmb__MiniCPM-SALA.json"),
    ("zaya1-8b", "Zyphra__ZAYA1-8B-legacy.json"),
])
def test_a_presets_config_keys_are_the_released_configs(preset, fixture):
    """A preset written for a family one engine alone serves keeps its released config's values."""
    released = json.loads((HF / fixture).read_text())
    config = compiled_presets()[preset]["config"]
    assert {k: released[k] for k in config} == config


def test_qwen3_next_preset():
    spec = load_model("qwen3-next-80b")
    assert spec.variant == Variant("gdn")
    assert dict(spec.params) == {"num_k_heads": 16, "num_v_heads": 32, "head_k_dim": 128, "head_v_dim": 128}
    assert (spec.ssm_layers, spec.attention_layers) == (36, 12)


def test_config_json_file(tmp_path):
    target = tmp_path / "jamba-mini"
    target.mkdir()
    shutil.copy(HF / "ai21labs__Jamba-v0.1.json", target / "config.json")
    spec = load_model(str(target / "config.json"))
    assert spec.name == "jamba-mini"                      # a config.json is named after its folder
    assert spec.source == str(target / "config.json")
    assert load_model(str(HF / "ai21labs__Jamba-v0.1.json")).name == "ai21labs__Jamba-v0.1"
    assert load_model(str(target)).params == spec.params  # the directory itself


def test_example_model_directory():
    spec = load_model(str(EXAMPLES / "granite-like"))
    assert spec.name == "granite-like"
    assert spec.variant == Variant("mamba2")
    assert dict(spec.params) == {"intermediate_size": 1024, "d_state": 64, "n_groups": 1, "num_heads": 16,
                                 "head_dim": 64}
    assert (spec.ssm_layers, spec.attention_layers) == (6, 2)


def test_example_yaml_model_file():
    spec = load_model(str(EXAMPLES / "toy-mamba2.yaml"))
    assert (spec.name, spec.source) == ("toy-mamba2", "examples/models/toy-mamba2.yaml")
    assert spec.variant == Variant("mamba2")
    assert dict(spec.params) == {"intermediate_size": 256, "d_state": 16, "n_groups": 4, "num_heads": 8,
                                 "head_dim": 32}
    assert spec.layers == ("ssm",) * 4


def test_yaml_overrides_and_cli_wins(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text((EXAMPLES / "toy-mamba2.yaml").read_text()
                    + "conv_dtype: float16\nssm_dtype: float32\nnum_spec: 1\n")
    spec = load_model(str(path))
    assert (spec.conv_dtype, spec.ssm_dtype, spec.num_spec) == ("float16", "float32", 1)
    spec = load_model(str(path), conv_dtype="bf16", num_spec=0)
    assert (spec.conv_dtype, spec.ssm_dtype, spec.num_spec) == ("bfloat16", "float32", 0)


def test_yaml_name_defaults_to_file_stem(tmp_path):
    path = tmp_path / "nameless.yml"
    path.write_text("config:\n" + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in
                                          json.loads((HF / "ai21labs__Jamba-v0.1.json").read_text()).items()))
    assert load_model(str(path)).name == "nameless"


def test_yaml_variant_key(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text("variant: Mamba2\nconfig:\n  model_type: custom\n  hidden_size: 64\n  mamba_expand: 2\n"
                    "  mamba_d_state: 16\n  mamba_n_groups: 1\n  mamba_n_heads: 4\n  mamba_d_head: 32\n"
                    "  mamba_d_conv: 4\n  num_hidden_layers: 2\n")
    assert load_model(str(path)).variant == Variant("mamba2")
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace("Mamba2", "mamba3"))
    with pytest.raises(UserError, match="variant must be one of mamba1, mamba2, gdn, kda"):
        load_model(str(bad))


@pytest.mark.parametrize("text, message", [
    ("name: x\n", "a model YAML file needs a 'config:' mapping of Hugging Face config keys"),
    ("config: [1, 2]\n", "a model YAML file needs a 'config:' mapping"),
    ("- just\n- a list\n", "a model YAML file needs a 'config:' mapping"),
    ("config: {a: 1\n", "not valid YAML"),
    ("config: {}\nlayers: 3\n", r"unknown top-level keys \['layers'\]; allowed: name, source"),
])
def test_bad_yaml(tmp_path, text, message):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        load_model(str(path))


def test_codestral_infinity_through_a_file():
    spec = load_model(str(HF / "mistralai__Mamba-Codestral-7B-v0.1.json"))
    assert spec.params["n_groups"] == 8


@pytest.mark.parametrize("text, message", [
    ('{"model_type": "jamba",', "invalid JSON at line 1 column"),
    ("", "invalid JSON at line 1 column 1"),
    ("[1, 2]", "a config.json must hold a JSON object, found list"),
])
def test_bad_json(tmp_path, text, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        load_model(str(path))


def test_missing_paths(tmp_path):
    with pytest.raises(UserError, match="no such file or directory"):
        load_model(str(tmp_path / "nope.json"))
    with pytest.raises(UserError, match="no such file or directory"):
        load_model("missing/config.json")
    with pytest.raises(UserError, match="directory holds no config.json"):
        load_model(str(tmp_path))


@pytest.mark.parametrize("typo,meant", [("qwen3.5", "qwen3.5-0.8b"), ("granite-4.0-h-tin", "granite-4.0-h-tiny"),
                                        ("QWEN3.5-0.8", "qwen3.5-0.8b"), ("mamba-130m.", "mamba-130m")])
def test_a_preset_name_with_a_dot_mistyped_suggests_the_preset(typo, meant):
    # a dot in a name is no file suffix: only .json, .yaml and .yml (or a path) make it a file
    with pytest.raises(UserError, match=rf"unknown model '{re.escape(typo)}'; did you mean '{re.escape(meant)}'\?"):
        load_model(typo)


def test_unknown_preset_suggests_the_closest():
    with pytest.raises(UserError, match=r"unknown model 'jamab'; did you mean 'jamba'\?"):
        load_model("jamab")
    with pytest.raises(UserError, match=r"unknown model 'nemotron-8b'; did you mean 'nemotron-h-8b'\?"):
        load_model("nemotron-8b")
    with pytest.raises(UserError) as err:
        load_model("zzzzzz")
    assert "did you mean" not in str(err.value)
    assert "built-in presets: gigachat3.5, glm-5-next, granite-4.0-h-tiny, jamba" in str(err.value)


def _fake_cache(root: Path, repo: str, configs: dict[str, dict], main: str | None) -> Path:
    base = root / f"models--{repo.replace('/', '--')}"
    for sha, config in configs.items():
        snap = base / "snapshots" / sha
        snap.mkdir(parents=True)
        (snap / "config.json").write_text(json.dumps(config))
    if main is not None:
        (base / "refs").mkdir()
        (base / "refs" / "main").write_text(main + "\n")
    return base


def _jamba(**change) -> dict:
    return {**json.loads((HF / "ai21labs__Jamba-v0.1.json").read_text()), **change}


def test_hf_cache_via_hf_hub_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "elsewhere"))   # HF_HUB_CACHE wins
    _fake_cache(tmp_path, "ai21labs/Jamba-v0.1", {"a" * 40: _jamba()}, main="a" * 40)
    spec = load_model("ai21labs/Jamba-v0.1")
    assert (spec.name, spec.source) == ("ai21labs/Jamba-v0.1", "ai21labs/Jamba-v0.1")
    assert spec.params["intermediate_size"] == 8192


def test_hf_cache_via_hf_home(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert hf_cache_dir() == tmp_path / "hub"
    _fake_cache(tmp_path / "hub", "org/name", {"b" * 40: _jamba()}, main="b" * 40)
    assert load_model("org/name").variant == Variant("mamba1")


def test_hf_cache_follows_refs_main(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    old, new = "1" * 40, "2" * 40
    base = _fake_cache(tmp_path, "org/name", {old: _jamba(mamba_d_state=16), new: _jamba(mamba_d_state=32)},
                       main=old)
    os.utime(base / "snapshots" / old / "config.json", (1, 1))          # the pinned one is older
    assert load_model("org/name").params["d_state"] == 16
    assert load_model("org/name").revision == old                       # the plan says which snapshot
    (base / "refs" / "main").unlink()
    assert load_model("org/name").params["d_state"] == 32               # no ref: the newest snapshot
    assert load_model("org/name").to_dict()["revision"] == new


def test_each_dtype_says_where_it_came_from(tmp_path):
    origin = load_model("nemotron-h-8b").origin
    assert origin["conv_dtype"] == "config key torch_dtype"
    assert origin["ssm_dtype"].startswith("Nemotron-H default: vLLM keeps this family's SSM state in float32")
    assert load_model("qwen3.5-0.8b").origin["ssm_dtype"] == "config key mamba_ssm_dtype"
    assert load_model("jamba").origin["ssm_dtype"] == "the conv dtype"
    assert load_model("jamba", ssm_dtype="fp32").origin["ssm_dtype"] == "--ssm-dtype"
    # vLLM reads Nemotron-H's mamba_ssm_cache_dtype before its float32 default.
    config = json.loads((HF / "nvidia__Nemotron-H-8B-Base-8K.partial.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "mamba_ssm_cache_dtype": "bfloat16"}))
    spec = load_model(str(path))
    assert (spec.ssm_dtype, spec.origin["ssm_dtype"]) == ("bfloat16", "config key mamba_ssm_cache_dtype")


@pytest.mark.parametrize("repo", ["org/absent", "org/absent-v0.1", "Qwen/Qwen3.5-0.8B-Extra"])
def test_repo_id_not_in_cache(tmp_path, monkeypatch, repo):
    # Dots in a repo id are not file suffixes: these are repo ids, not missing files.
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(UserError) as err:
        load_model(repo)
    assert str(err.value) == (f"'{repo}' is not in the local Hugging Face cache ({tmp_path}) nor a built-in "
                              f"preset's source; mambaxfer never downloads: fetch its config.json first, or "
                              f"pass a path")


@pytest.mark.parametrize("repo,preset", [("Qwen/Qwen3.5-0.8B", "qwen3.5-0.8b"),
                                         ("ibm-granite/granite-4.0-h-tiny", "granite-4.0-h-tiny"),
                                         ("ai21labs/jamba-v0.1", "jamba")])
def test_a_presets_source_not_in_the_cache_is_the_preset(tmp_path, monkeypatch, repo, preset):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert load_model(repo) == load_model(preset)


def test_cli_style_overrides_reach_the_spec():
    spec = load_model("jamba", conv_dtype="float32", num_spec=2)
    assert (spec.conv_dtype, spec.ssm_dtype, spec.num_spec, spec.conv_rows) == ("float32", "float32", 2, 3)
    with pytest.raises(UserError, match="missing key for num_k_heads"):
        load_model("jamba", variant=Variant("gdn"))


def test_local_config_finds_a_file_a_folder_and_a_cached_repo(tmp_path, monkeypatch):
    from mambaxfer_cli.readers.model_source import local_config

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    snapshot = tmp_path / "hub" / "models--org--drafter" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert local_config(str(folder)) == local_config(str(folder / "config.json")) == folder / "config.json"
    assert local_config("org/drafter") == snapshot / "config.json"
    assert local_config("org/absent") is None and local_config(str(tmp_path / "none.json")) is None
    assert local_config("x" * 5000) is None       # too long for a path: not here
