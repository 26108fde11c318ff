"""JetNemotron under --engine sglang, as SGLang 0.5.23 keeps it (checked against its own classes on
the released Jet-Nemotron-2B config, tests/fixtures/hf-configs/NVlabs__Jet-Nemotron__jetlm_2B.json):
``JetNemotronConfig.mamba2_cache_params`` is ``Mamba2StateShape.create`` over 12 heads of 96 keys and
``int(96 · 2.6666666667)`` = 256 values, no conv_shard_groups, layers ``linear_layer_ids`` (the "jet"
entries of layer_types); ``JetBlock`` splits its projection by the whole model's sizes, so SGLang
runs it at attention TP 1 only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_run import messages
from test_sglang_conformance import one_off_probe, run_in_sglang

FIXTURE = Path(__file__).parent / "fixtures" / "hf-configs" / "NVlabs__Jet-Nemotron__jetlm_2B.json"
JET_LAYERS = [*range(14), 15, 16, 17, 18, *range(22, 28)]     # SGLang's linear_layer_ids


def test_plan_moves_the_state_sglang_s_config_class_gives(cli):
    code, out, err = cli("plan", "--engine", "sglang", "--model", str(FIXTURE), "--p-tp", "1", "--d-tp", "1",
                         "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    conv = [e for e in document["entries"]["decode"] if e["field"] == "conv"]
    temporal = [e for e in document["entries"]["decode"] if e["field"] == "temporal"]
    assert [e["layer_id"] for e in conv] == [e["layer_id"] for e in temporal] == JET_LAYERS
    # conv (12·96·2 + 12·256, K-1) bf16 as one block; temporal (12, 256, 96) float32
    assert (conv[0]["item_len"], conv[0]["dim"], conv[0]["conv_shard_groups"]) == (5376 * 3 * 2, 5376, None)
    assert (temporal[0]["item_len"], temporal[0]["dim"]) == (12 * 256 * 96 * 4, 12)
    assert document["verdict"]["right"]


@pytest.mark.parametrize("change, words", [
    ({"efficient_attention_config": [1]}, "missing key efficient_attention_config.jet"),
    ({"layer_types": ["jet", "mamba"]}, "layer_types must list jet, attn, swa per layer"),
])
def test_a_config_sglang_s_class_cannot_read_is_one_line(cli, tmp_path, change, words):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**json.loads(FIXTURE.read_text()), **change}))
    code, _, err = cli("plan", "--engine", "sglang", "--model", str(config), "--p-tp", "1", "--d-tp", "1")
    assert code == 2 and words in " ".join(err.split()) and len(messages(err.strip())) == 1, err


def test_jet_vlm_is_read_through_its_text_config(cli, tmp_path):
    # JetVLMConfig's text_config is a JetNemotronConfig, whose mamba2_cache_params it hands the pool.
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"architectures": ["JetVLMForConditionalGeneration"], "model_type": "jet_vlm",
                                  "text_config": json.loads(FIXTURE.read_text())}))
    plans = [json.loads(cli("plan", "--engine", "sglang", "--model", m, "--p-tp", "1", "--d-tp", "1",
                            "--format", "json")[1])["entries"]
             for m in (str(config), str(FIXTURE))]
    assert plans[0] == plans[1] and len(plans[0]["decode"]) == 2 * len(JET_LAYERS)


@pytest.mark.parametrize("p_tp,d_tp", [(1, 2), (2, 2)])
def test_a_tp_size_above_one_is_refused_as_jetblock_fails(cli, p_tp, d_tp):
    code, _, err = cli("plan", "--engine", "sglang", "--model", "jet-nemotron-2b", "--p-tp", str(p_tp),
                       "--d-tp", str(d_tp))
    words = " ".join(err.split())
    assert code == 1 and "JetBlock (models/jet_nemotron.py) runs only at attention TP 1" in words, err
    assert "Traceback" not in err


def test_check_checks_tp_1_and_says_why_not_the_rest(cli):
    code, out, err = cli("check", "--engine", "sglang", "--model", "jet-nemotron-2b", "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    assert [(r["p_tp"], r["d_tp"], r["outcome"]) for r in document["pairings"]] == [(1, 1, "right")], document
    assert "not checked at TP 2, 3, 4, 5, 6, 7, 8" in document["unchecked"][0]


@pytest.mark.usefixtures("nixl")
def test_execute_moves_its_state_as_sglang_writes_it():
    from cli_run import run_json

    code, doc = run_json("execute", "--engine", "sglang", "--device", "cpu", "--format", "json", "--timeout", "90",
                         "--model", "jet-nemotron-2b", "--layers", "4", "--p-tp", "1", "--d-tp", "1", "--iters", "1")
    assert code == 0 and doc["verified"] and doc["bad_bytes"] == doc["predicted_bad_bytes"] == 0, doc
    assert {f["field"] for d in doc["decode"] for f in d["fields"]} >= {"conv", "temporal"}


# In SGLang's environment: its config class's state at TP 1 and 2 and JetBlock built at each, and the
# same with the config class's layers planted one off (1-based), which conformance must catch there alone.
JETVLM = r"""
import pathlib, tempfile     # JetVLM: the same config as its text_config, through JetVLMConfig
text = json.loads(pathlib.Path("tests/fixtures/hf-configs/NVlabs__Jet-Nemotron__jetlm_2B.json").read_text())
path = pathlib.Path(tempfile.mkdtemp()) / "config.json"
path.write_text(json.dumps({"architectures": ["JetVLMForConditionalGeneration"], "model_type": "jet_vlm",
                            "text_config": text}))
out["vlm"] = {r.name: [r.outcome, r.cases] for r in c.probe([served_model(str(path))], base, max_tp=2).results}
"""
PROBE = one_off_probe("JetNemotronConfig state", "linear_layer_ids", "jet-nemotron-2b", more=JETVLM)


def test_conformance_compares_its_config_class_and_jetblock_and_catches_a_planted_fault():
    result = run_in_sglang("-c", PROBE)
    assert result.returncode == 0, result.stderr[-3000:]
    outcomes = json.loads(result.stdout)
    assert outcomes["as is"]["JetNemotronConfig state"] == ["agrees", 2]      # TP 1 and 2
    assert outcomes["as is"]["JetBlock TP sizes"] == ["agrees", 2]            # fits at TP 1 only, on both sides
    assert outcomes["as is"]["mambaish_config state layers"] == ["agrees", 1]
    assert {o for o, _ in outcomes["as is"].values()} == {"agrees"}
    assert {n for n, (o, _) in outcomes["planted"].items() if o != "agrees"} == {"JetNemotronConfig state"}
    assert {o for o, _ in outcomes["vlm"].values()} == {"agrees"}
    assert outcomes["vlm"]["JetNemotronConfig state"] == outcomes["vlm"]["JetBlock TP sizes"] == ["agrees", 2]
    assert outcomes["vlm"]["mambaish_config state layers"] == ["agrees", 1]


def test_preflight_refuses_a_decode_server_above_tp_1(cli, tmp_path):
    (tmp_path / "config.json").write_text(FIXTURE.read_text())
    line = f"python -m sglang.launch_server --model-path {tmp_path} --disaggregation-mode {{}} --tp {{}}"
    code, out, err = cli("preflight", "--prefill", line.format("prefill", 1), "--decode", line.format("decode", 2),
                         "--format", "json")
    document = json.loads(out)
    assert code == 1 and document["verdict"] == "refused", err + out
    assert "does not start the decode server at TP 2: SGLang's JetBlock" in document["headline"]
