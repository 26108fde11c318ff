"""LFM2 under --engine sglang: its short-conv state as SGLang 0.5.23 keeps it (configs/lfm2.py
``Lfm2Config.mamba2_cache_params``, checked against SGLang's own class on the preset's config:
conv (2048 / TP, 2), temporal (1, 2048, 0), layers 0, 1, 3, 4, 6, 7, 9, 11, 13, 15), and vLLM's
refusal of it kept beside."""

from __future__ import annotations

import json

import pytest




def test_plan_moves_the_conv_window_of_sglang_s_conv_layers(cli):
    code, out, err = cli("plan", "--engine", "sglang", "--model", "lfm2-1.2b", "--p-tp", "1", "--d-tp", "2",
                         "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    prefill, decode = document["entries"]["prefill"], document["entries"]["decode"]
    assert {e["field"] for e in prefill + decode} == {"conv"}      # no SSM state: no temporal entry
    assert [e["layer_id"] for e in prefill] == [0, 1, 3, 4, 6, 7, 9, 11, 13, 15]
    assert (prefill[0]["item_len"], prefill[0]["dim"], decode[0]["item_len"], decode[0]["dim"]) == \
        (2048 * 2 * 2, 2048, 1024 * 2 * 2, 1024)
    assert prefill[0]["conv_shard_groups"] is None and document["verdict"]["right"]
    assert document["writes"] == document["exact"]


def test_a_tp_size_that_does_not_divide_the_channels_is_sglang_s_refusal(cli):
    code, _, err = cli("plan", "--engine", "sglang", "--model", "lfm2-1.2b", "--p-tp", "1", "--d-tp", "3")
    assert code == 1 and "TP 3 does not divide hidden_size = 2048" in " ".join(err.split()), err


def test_check_beside_vllm_keeps_vllm_s_refusal_as_a_line(cli, monkeypatch):
    import mambaxfer_cli.readers.model_source as source

    monkeypatch.setattr(source, "preset_names", lambda: ["lfm2-1.2b", "mamba-codestral-7b"])
    code, out, err = cli("check", "--engine", "vllm,sglang", "--all-presets", "--max-tp", "2", "--format", "json")
    document = json.loads(out)
    vllm, sglang = document["vllm"], document["sglang"]
    assert {r["model"] for r in vllm["results"]} == {"mamba-codestral-7b"}
    assert any(line.startswith("lfm2-1.2b: not checked: ") and "SHORT_CONV" in line for line in vllm["unchecked"])
    lfm2 = [r for r in sglang["pairings"] if r["model"] == "lfm2-1.2b"]
    assert len(lfm2) == 4 and {r["outcome"] for r in lfm2} == {"right"}, lfm2
    code, _, err = cli("check", "--engine", "vllm", "--model", "lfm2-1.2b")
    assert code == 1 and "derive_mamba_conv_split" in err       # one model asked: vLLM's refusal, as before


@pytest.mark.usefixtures("nixl")
@pytest.mark.parametrize("p_tp,d_tp", [(1, 2), (2, 1)])
def test_execute_moves_every_conv_byte_sglang_writes(p_tp, d_tp):
    from cli_run import run_json

    code, doc = run_json("execute", "--engine", "sglang", "--device", "cpu", "--format", "json", "--timeout", "90",
                         "--model", "lfm2-1.2b", "--layers", "4", "--p-tp", str(p_tp), "--d-tp", str(d_tp),
                         "--iters", "1")
    assert code == 0 and doc["verified"] and doc["bad_bytes"] == doc["predicted_bad_bytes"] == 0, doc
    assert {f["field"] for d in doc["decode"] for f in d["fields"]} >= {"conv"}
    assert "temporal" not in {f["field"] for d in doc["decode"] for f in d["fields"]}


def test_preflight_of_two_sglang_servers_of_lfm2(cli):
    line = ("python -m sglang.launch_server --model-path LiquidAI/LFM2-1.2B --tp {} --disaggregation-mode {} "
            "--disaggregation-transfer-backend nixl --page-size 1")
    code, out, err = cli("preflight", "--prefill", line.format(1, "prefill"), "--decode", line.format(2, "decode"),
                         "--format", "json")
    assert code == 0, err + out
    assert "lfm2-1.2b" in out
