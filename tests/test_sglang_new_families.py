"""GigaChat3.5 under ``--engine sglang``: Qwen3GatedDeltaNet layers whose config class
(``configs/gigachat35.py``) passes no ``conv_shard_groups``, so SGLang slices the conv state as
one block across TP sizes. Built on the CPU with SGLang 0.5.23's own mixer at P TP 1 -> D TP 2
(GigaChat35Config's defaults: 1,024 query, 1,024 key and 2,048 value channels), decode rank 0
keeps query[0:512], key[0:512], value[0:1024] and receives channels 0..2047 (query and key whole):
1,536 of its 2,048 channels wrong; rank 1 receives the value channels 2048..4095: 1,024 wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_run import run_cli
from mambaxfer_cli.engines.sglang.conformance import conv_channels
from mambaxfer_cli.engines.sglang.shapes import sglang_model, state_shape
from mambaxfer_cli.engines.sglang.slices import slice_blocks
from mambaxfer_cli.planning.model import ATTENTION, SSM
from mambaxfer_cli.readers.model_config import spec_from_config
from mambaxfer_cli.readers.model_source import load_model

FIXTURE = Path(__file__).parent / "fixtures" / "hf-configs" / "sglang-0.5.23__GigaChat35Config-defaults.json"
CONV_ROWS, BF16, LAYERS = 3, 2, 12
WRONG_CHANNELS = {0: 1536, 1: 1024}      # per decode rank, from SGLang's mixer built on the CPU


def test_the_preset_is_the_fixture_sglang_config_class_defaults():
    config = {k: v for k, v in json.loads(FIXTURE.read_text()).items() if not k.startswith("_")}
    assert load_model("gigachat3.5").hf_config == config
    model = load_model("gigachat3.5")
    assert model.family == "GigaChat3.5" and model.variant == "gdn" and model.layers == (SSM,) * LAYERS


def test_sglang_passes_no_conv_shard_groups_for_it_as_it_does_for_qwen():
    giga, qwen = (sglang_model(load_model(n)) for n in ("gigachat3.5", "qwen3.5-0.8b"))
    assert state_shape(giga, 2).conv_shard_groups is None
    assert state_shape(qwen, 2).conv_shard_groups == (2048, 2048, 2048)


def test_one_block_lands_the_wrong_channels_on_each_decode_rank():
    model = load_model("gigachat3.5")
    full = conv_channels(model, 1, 0)
    for d, wrong in WRONG_CHANNELS.items():
        kept = conv_channels(model, 2, d)
        (block,) = slice_blocks(src_dim=4096, dst_dim=2048, src_tp=1, dst_tp=2, dst_rank=d, src_rank=0)
        written = full[block.src:block.src + block.length]
        assert sum(a != b for a, b in zip(kept, written)) == wrong


def test_check_names_the_corruption_with_its_bytes():
    result = run_cli("check", "--engine", "sglang", "--model", "gigachat3.5", "--pairs", "1:2,2:2")
    assert result.code == 1, result.stderr
    bytes_wrong = sum(WRONG_CHANNELS.values()) * CONV_ROWS * BF16 * LAYERS
    assert bytes_wrong == 184320
    words = " ".join(result.stdout.split())
    assert "corrupts the conv state of gigachat3.5 at P TP 1 → D TP 2: 184,320 bytes wrong" in words
    document = json.loads(run_cli("check", "--engine", "sglang", "--model", "gigachat3.5", "--pairs", "1:2",
                                  "--format", "json").stdout)
    assert document["pairings"][0]["bytes_wrong"] == {"conv": bytes_wrong, "temporal": 0}


def test_its_layers_are_the_config_classes():
    base = {k: v for k, v in json.loads(FIXTURE.read_text()).items() if not k.startswith("_")}
    listed = spec_from_config({**base, "full_attention_layers": [3, 7, 11]}, name="g", source="t")
    assert listed.layers == tuple(ATTENTION if i in (3, 7, 11) else SSM for i in range(LAYERS))
    assert listed.mla and listed.num_kv_heads == 1 and listed.head_size == 512 + 64
    typed = spec_from_config({**base, "layer_types": ["linear_attention"] * 11 + ["attention"]}, name="g", source="t")
    assert typed.layers == (SSM,) * 11 + (ATTENTION,)


# --- Nemotron-Nano-VL, and the states SGLang keeps that no variant of mambaxfer's expresses ----------

NEMOTRON_H = Path(__file__).parent / "fixtures" / "hf-configs" / "nvidia__Nemotron-H-8B-Base-8K.partial.json"


def test_nemotron_nano_vl_is_read_through_its_nemotron_h_llm_config(tmp_path):
    # NemotronH_Nano_VL_V2_Config keeps a NemotronHConfig under llm_config (configs/nano_nemotron_vl.py),
    # which mamba2_config hands SGLang's pool: here Nemotron-H-8B's released config, so wrapped.
    wrapped = tmp_path / "nano-vl.json"
    wrapped.write_text(json.dumps({"architectures": ["NemotronH_Nano_VL_V2"], "model_type": "NemotronH_Nano_VL_V2",
                                   "llm_config": json.loads(NEMOTRON_H.read_text())}))
    result = run_cli("check", "--engine", "sglang", "--model", str(wrapped), "--pairs", "1:2", "--format", "json")
    assert result.code == 1, result.stderr
    assert json.loads(result.stdout)["pairings"][0]["bytes_wrong"] == {"conv": 811008, "temporal": 0}


def test_vllm_serves_no_gigachat_and_all_presets_leaves_it_to_sglang():
    result = run_cli("check", "--engine", "vllm", "--model", "gigachat3.5", "--pairs", "1:2")
    assert result.code == 1 and "Traceback" not in result.stderr
    assert "no vLLM release mambaxfer knows serves GigaChat35ForCausalLM" in " ".join(result.stderr.split())
    both = json.loads(run_cli("check", "--engine", "vllm,sglang", "--all-presets", "--max-tp", "2",
                              "--format", "json", timeout=600).stdout)
    assert "gigachat3.5" not in {r["model"] for r in both["vllm"]["results"]}
    assert {p["bytes_wrong"]["conv"] for p in both["sglang"]["pairings"]
            if p["model"] == "gigachat3.5" and p["p_tp"] != p["d_tp"]} == {184320}


@pytest.mark.parametrize("preset, sglang_file, architectures", [
    ("jet-nemotron-2b", "models/jet_nemotron.py", {"JetNemotronForCausalLM", "JetVLMForConditionalGeneration"}),
    ("minicpm-sala", "models/minicpm.py", {"MiniCPMSALAForCausalLM"}),
    ("zaya1-8b", "models/zaya.py", {"ZayaForCausalLM"}),
])
def test_models_answers_for_a_family_it_once_listed_unread(cli, preset, sglang_file, architectures):
    code, out, _ = cli("models", "--engine", "sglang", "--format", "json")
    document = json.loads(out)
    row = next(r for r in document["models"] if r["name"] == preset)
    assert code == 0 and row["sglang_file"] == sglang_file and row["answered"], row
    assert not architectures & set(json.dumps(document["state_not_read"]).split('"'))
