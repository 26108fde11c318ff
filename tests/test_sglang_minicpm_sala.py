"""MiniCPM-SALA under --engine sglang, as SGLang 0.5.23 keeps it (checked against its own classes on
the released config, tests/fixtures/hf-configs/openbmb__MiniCPM-SALA.json: openbmb/MiniCPM-SALA's
config.json as a GPTQModel quantization of it saved it, its quantization_config dropped):
``MiniCPMHybridConfig.mamba2_cache_params`` is ``Mamba2StateShape.create`` with no conv
(``intermediate_size`` 0, ``conv_kernel`` 1: a zero-size entry ``MambaPool`` does not advertise) and a
temporal (``lightning_nkv`` / TP, 128, 128), layers ``lightning_layer_ids``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_run import messages
from test_sglang_conformance import one_off_probe, run_in_sglang

FIXTURE = Path(__file__).parent / "fixtures" / "hf-configs" / "openbmb__MiniCPM-SALA.json"
LIGHTNING = [*range(1, 9), *range(10, 16), *range(18, 22), *range(23, 29)]   # SGLang's lightning_layer_ids


@pytest.mark.parametrize("p_tp,d_tp", [(1, 2), (4, 1)])
def test_plan_moves_only_the_temporal_state_sglang_s_config_class_gives(cli, p_tp, d_tp):
    code, out, err = cli("plan", "--engine", "sglang", "--model", str(FIXTURE), "--p-tp", str(p_tp),
                         "--d-tp", str(d_tp), "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    for side, tp in (("prefill", p_tp), ("decode", d_tp)):
        entries = document["entries"][side]
        assert {e["field"] for e in entries} == {"temporal"}     # the empty conv is not advertised
        assert [e["layer_id"] for e in entries] == LIGHTNING
        assert (entries[0]["item_len"], entries[0]["dim"]) == (32 // tp * 128 * 128 * 4, 32 // tp)
    assert document["verdict"]["right"]


def test_the_plan_s_heading_names_only_the_state_it_moves(cli):
    code, out, err = cli("plan", "--engine", "sglang", "--model", "minicpm-sala", "--p-tp", "1", "--d-tp", "2")
    heading = " ".join(out.split("\n✓")[0].split())
    assert code == 0 and heading.endswith("P TP 1 → D TP 2 · temporal float32"), out


def test_a_config_sglang_s_class_refuses_is_one_line(cli, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**json.loads(FIXTURE.read_text()), "lightning_nkv": 2}))
    code, _, err = cli("plan", "--engine", "sglang", "--model", str(config), "--p-tp", "1", "--d-tp", "1")
    assert code == 2 and len(messages(err.strip())) == 1, err
    words = " ".join(err.split())      # the message wraps between words at the output's width
    assert "requires equal query and KV head counts" in words and "lightning_nh=32, lightning_nkv=2" in words


def test_check_checks_the_tp_sizes_that_divide_its_heads(cli):
    code, out, err = cli("check", "--engine", "sglang", "--model", "minicpm-sala", "--max-tp", "3",
                         "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    assert [(r["p_tp"], r["d_tp"], r["outcome"]) for r in document["pairings"]] == [
        (1, 1, "right"), (1, 2, "right"), (2, 1, "right"), (2, 2, "right")], document
    assert "not checked at TP 3" in document["unchecked"][0]


def test_vllm_still_refuses_it(cli):
    code, _, err = cli("plan", "--engine", "vllm", "--model", "minicpm-sala", "--p-tp", "1", "--d-tp", "1")
    assert code == 1 and "no vLLM release mambaxfer knows serves MiniCPMSALAForCausalLM" in " ".join(err.split()), err
    code, _, err = cli("plan", "--engine", "vllm", "--model", "minicpm-sala", "--variant", "lightning",
                       "--p-tp", "1", "--d-tp", "1")
    assert code == 2 and len(messages(err.strip())) == 1, err
    assert "vLLM's NIXL connector refuses" in " ".join(err.split()), err


@pytest.mark.usefixtures("nixl")
def test_execute_moves_its_state_as_sglang_writes_it():
    from cli_run import run_json

    code, doc = run_json("execute", "--engine", "sglang", "--device", "cpu", "--format", "json", "--timeout", "90",
                         "--model", "minicpm-sala", "--layers", "4", "--p-tp", "1", "--d-tp", "2", "--iters", "1")
    assert code == 0 and doc["verified"] and doc["bad_bytes"] == doc["predicted_bad_bytes"] == 0, doc
    assert {f["field"] for d in doc["decode"] for f in d["fields"]} == {"temporal", "k", "v"}   # no conv


# In SGLang's environment: its config class's state at TP 1 and 2 and the pool's entries, and the same
# with the config class's lightning layers planted one off, which conformance must catch there alone.
PROBE = one_off_probe("MiniCPMHybridConfig state", "lightning_layer_ids", "minicpm-sala")


def test_conformance_compares_its_config_class_and_pool_and_catches_a_planted_fault():
    result = run_in_sglang("-c", PROBE)
    assert result.returncode == 0, result.stderr[-3000:]
    outcomes = json.loads(result.stdout)
    assert outcomes["as is"]["MiniCPMHybridConfig state"] == ["agrees", 2]      # TP 1 and 2
    assert outcomes["as is"]["MambaPool transfer entries"] == ["agrees", 6]     # TP 1, 2 and 4 KDA stand-ins
    assert outcomes["as is"]["mambaish_config state layers"] == ["agrees", 1]
    assert {o for o, _ in outcomes["as is"].values()} == {"agrees"}
    assert {n for n, (o, _) in outcomes["planted"].items() if o != "agrees"} == {"MiniCPMHybridConfig state"}


def test_preflight_refuses_a_decode_tp_size_that_does_not_divide_its_heads(cli, tmp_path):
    (tmp_path / "config.json").write_text(FIXTURE.read_text())
    line = f"python -m sglang.launch_server --model-path {tmp_path} --disaggregation-mode {{}} --tp {{}}"
    code, out, err = cli("preflight", "--prefill", line.format("prefill", 1), "--decode", line.format("decode", 2),
                         "--format", "json")
    assert code == 0 and json.loads(out)["verdict"] == "works", err + out
    code, out, err = cli("preflight", "--prefill", line.format("prefill", 1), "--decode", line.format("decode", 3),
                         "--format", "json")
    document = json.loads(out)
    assert code == 1 and document["verdict"] == "refused", err + out
    assert "lightning_nkv = 32" in document["headline"], document["headline"]
