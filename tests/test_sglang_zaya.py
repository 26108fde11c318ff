"""Zaya under --engine sglang, as SGLang 0.5.23 keeps it (checked against its own classes on the
released config, tests/fixtures/hf-configs/Zyphra__ZAYA1-8B-legacy.json: Zyphra/ZAYA1-8B-legacy's
config.json at revision 1bef1fb587fc4bcb78f318f49ff2ef2b2510f073, as SGLang upstream's
test/registered/unit/configs/test_zaya_config.py quotes it): ``ZayaConfig.mamba2_cache_params`` keeps
per CCA layer a conv ``((8 + 2) · 128 / TP, 2)``, each rank its query heads then its key heads, and the
previous hidden state ``(2048, 1)`` whole on every rank; its temporal ``(1, 1, 0)`` is empty, so
``MambaPool`` does not advertise it. No ``conv_shard_groups``: SGLang slices the conv as one block."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_run import messages
from test_families import FAMILY_NAMES, PACKAGE, named_families
from test_sglang_conformance import run_in_sglang

FIXTURE = Path(__file__).parent / "fixtures" / "hf-configs" / "Zyphra__ZAYA1-8B-legacy.json"
CCA_LAYERS = list(range(0, 80, 2))     # ZayaConfig.linear_layer_ids: the even layers without zaya_layers


@pytest.mark.parametrize("p_tp,d_tp", [(1, 2), (2, 1)])
def test_plan_gives_sglang_s_two_conv_tensors_per_layer(cli, p_tp, d_tp):
    code, out, err = cli("plan", "--engine", "sglang", "--model", str(FIXTURE), "--p-tp", str(p_tp),
                         "--d-tp", str(d_tp), "--format", "json")
    assert code == 0, err     # SGLang runs it (and corrupts it: check's exit 1)
    document = json.loads(out)
    for side, tp in (("prefill", p_tp), ("decode", d_tp)):
        entries = [e for e in document["entries"][side] if e["field"] in ("conv", "prev_hs", "temporal")]
        assert [(e["field"], e["layer_id"]) for e in entries] == [("conv", i) for i in CCA_LAYERS] + [
            ("prev_hs", i) for i in CCA_LAYERS]          # conv[0] then conv[1], the empty temporal not advertised
        assert (entries[0]["item_len"], entries[0]["dim"]) == (1280 // tp * 2 * 2, 1280 // tp)   # bf16
        assert (entries[-1]["item_len"], entries[-1]["dim"]) == (2048 * 2, 2048)


def test_check_names_the_corruption_of_the_cca_channels_and_of_the_whole_prev_hs(cli):
    code, out, err = cli("check", "--engine", "sglang", "--model", "zaya1-8b", "--format", "json")
    assert code == 1, err
    rows = {(r["p_tp"], r["d_tp"]): r for r in json.loads(out)["pairings"]}
    assert sorted(rows) == [(1, 1), (1, 2), (2, 1), (2, 2)]       # num_key_value_heads 2: no TP above 2
    assert rows[1, 1]["outcome"] == rows[2, 2]["outcome"] == "right"
    # P TP 1 → D TP 2: D1 gets channels [640, 1280) where it keeps Q [512, 1024) and K [1152, 1280),
    # D0 [512, 640) where it keeps K [1024, 1152): 512 + 128 channels of 2 rows of 2 bytes, 40 layers.
    assert rows[1, 2]["outcome"] == "corrupts" and rows[1, 2]["bytes_wrong"] == {
        "conv": 640 * 4 * 40, "temporal": 0, "prev_hs": 0}, rows[1, 2]
    # P TP 2 → D TP 1: P1's whole prev_hs lands one item past D's (the next slot), and its CCA
    # channels after P0's.
    assert rows[2, 1]["bytes_wrong"] == {"conv": 2560 * 40, "temporal": 0, "prev_hs": 4096 * 40}, rows[2, 1]


def test_vllm_refuses_it_in_its_connector_s_words(cli):
    code, _, err = cli("plan", "--engine", "vllm", "--model", "zaya1-8b", "--p-tp", "1", "--d-tp", "1")
    words = " ".join(err.split())     # the message wraps between words at the output's width
    assert code == 1 and "NIXL connector refuses" in words and "derive_mamba_conv_split" in words, err


def test_a_tp_size_its_cca_refuses(cli):
    code, _, err = cli("plan", "--engine", "sglang", "--model", "zaya1-8b", "--p-tp", "1", "--d-tp", "4")
    assert code == 1 and "num_k_heads (2) must be divisible by tp_size (4)" in " ".join(err.split()), err


@pytest.mark.usefixtures("nixl")
def test_execute_lands_the_bytes_check_predicts():
    from cli_run import run_json

    code, doc = run_json("execute", "--engine", "sglang", "--device", "cpu", "--format", "json", "--timeout", "90",
                         "--model", "zaya1-8b", "--layers", "4", "--p-tp", "2", "--d-tp", "1", "--iters", "1")
    assert code == 1 and doc["bad_bytes"] == doc["predicted_bad_bytes"] == (2560 + 4096) * 2, doc   # 2 CCA layers
    fields = {f["field"]: f for d in doc["decode"] for f in d["fields"]}
    assert fields["prev_hs"]["beyond"] == 4096 * 2 and fields["conv"]["wrong"] == 2560 * 2, fields


# In SGLang's environment: its config class's state at TP 1 and 2, its pool's entries, and its NIXL
# and Mooncake managers' sends between its own pools at every pairing (the bytes they leave wrong
# included: check's above), then the config class's CCA layers planted one off, which conformance
# must catch there alone.
PROBE = """
import json
from mambaxfer_cli.engines.sglang import conformance as c

base = c.load_functions()
real = base["ZayaConfig state"]
def one_off(**k):   # an MoE layer first: the CCA layers one past SGLang's
    return real(**k, zaya_layers=[16, *["a", 16] * (k["num_hidden_layers"] // 2)][:k["num_hidden_layers"]])
one_off.model_type = real.model_type
out = {}
for label, functions in (("as is", base), ("planted", {**base, "ZayaConfig state": one_off})):
    report = c.probe([c.served_model("zaya1-8b")], functions, max_tp=2)
    out[label] = {r.name: [r.outcome, r.cases] for r in report.results}
print(json.dumps(out))
"""


def test_conformance_compares_its_config_class_pool_and_sends_and_catches_a_planted_fault():
    result = run_in_sglang("-c", PROBE)
    assert result.returncode == 0, result.stderr[-3000:]
    outcomes = json.loads(result.stdout)
    assert outcomes["as is"]["ZayaConfig state"] == ["agrees", 2]             # TP 1 and 2
    assert outcomes["as is"]["MambaPool transfer entries"] == ["agrees", 6]   # its TP 1 and 2, and KDA stand-ins
    assert outcomes["as is"]["NIXL state send"] == outcomes["as is"]["Mooncake state send"] == ["agrees", 4]
    assert {o for o, _ in outcomes["as is"].values()} == {"agrees"}
    assert {n: o for n, (o, _) in outcomes["planted"].items() if o != "agrees"} == {"ZayaConfig state": "differs"}


def test_the_cca_variant_on_another_family_s_config_is_one_line(cli):
    # CCA's dimensions come from ZayaConfig's own keys; no generic key stands in for them.
    code, _, err = cli("plan", "--engine", "sglang", "--variant", "cca", "--model", "nemotron-h-8b",
                       "--p-tp", "1", "--d-tp", "1")
    assert code == 2 and len(messages(err.strip())) == 1, err
    assert "conv_kernel is read from its family's own keys alone" in " ".join(err.split()), err


def test_the_plan_names_the_layer_ids_once_for_both_conv_tensors(cli):
    code, out, err = cli("plan", "--engine", "sglang", "--model", "zaya1-8b", "--p-tp", "1", "--d-tp", "2")
    words = " ".join(out.split())
    said = words.split("layer ids (MambaPool.get_state_layer_ids, the model's own): ", 1)[1].split(" writes", 1)[0]
    assert said == ", ".join(map(str, CCA_LAYERS)), said      # prev_hs's are conv's: not said twice


def test_only_its_family_module_names_zaya_or_cca_among_sglang_s(monkeypatch):
    # Its state shape and CCA's asserts are hooks of engines/sglang/families/zaya.py (issue 35).
    monkeypatch.setitem(FAMILY_NAMES, "zaya", r"zaya|\bcca\b")
    paths = (f.relative_to(PACKAGE).as_posix() for f in (PACKAGE / "engines" / "sglang").rglob("*.py"))
    found = [path for path in paths if "zaya" in named_families(path, (PACKAGE / path).read_text())]
    assert found == []
