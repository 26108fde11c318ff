"""plan, inspect and check under --engine sglang, and check --engine vllm,sglang side by side:
SGLang 0.5.23's writes proven on real bytes, through the real CLI."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from cli_run import assert_refused, assert_user_error, messages, run_cli
from mambaxfer_cli.engines.sglang import writes as writes_module
from mambaxfer_cli.engines.sglang.check import FAIL, FAILS, RIGHT, check_pairing
from mambaxfer_cli.engines.sglang.conformance import served_presets
from mambaxfer_cli.engines.sglang.plan import plan
from mambaxfer_cli.engines.sglang.proof import outcomes
from mambaxfer_cli.engines.sglang.shapes import tp_sizes
from mambaxfer_cli.engines.sglang.writes import StateWrite, check_side
from mambaxfer_cli.readers.model_source import compiled_presets, load_model


def words(text: str) -> str:
    return " ".join(text.split())


def test_plan_shows_the_mamba2_corruption_with_slices_and_descriptors():
    result = run_cli("plan", "--engine", "sglang", "--model", "nemotron-h-8b", "--p-tp", "1", "--d-tp", "2")
    assert result.code == 0, result.stderr
    text = words(result.stdout)
    assert "SGLang 0.5.23 corrupts the conv state of nemotron-h-8b at P TP 1 → D TP 2: 811,008 bytes wrong" in text
    assert "D0 ← P0; D1 ← P0" in text          # the rank mapping
    document = json.loads(run_cli("plan", "--engine", "sglang", "--model", "nemotron-h-8b", "--p-tp", "1",
                                  "--d-tp", "2", "--format", "json").stdout)
    assert document["engine"] == "sglang" and document["release"] == "0.5.23"
    assert document["verdict"]["bytes_wrong"] == 811_008
    layers = document["verdict"]["ssm_layers"]
    # One descriptor per write and layer (per slot, not per block).
    assert len(document["descriptors"]) == len(document["writes"]) * layers
    one = run_cli("plan", "--engine", "sglang", "--model", "nemotron-h-8b", "--p-tp", "1", "--d-tp", "2",
                  "--d-rank", "1", "--format", "json")
    assert {w["d_rank"] for w in json.loads(one.stdout)["writes"]} == {1}


def test_check_proves_gdn_right_and_mamba2_wrong_and_exits_by_it():
    right = run_cli("check", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--max-tp", "4", "--format", "json")
    assert right.code == 0, right.stderr
    document = json.loads(right.stdout)
    assert document["ok"] and {p["outcome"] for p in document["pairings"]} == {RIGHT}
    assert {(p["p_tp"], p["d_tp"]) for p in document["pairings"]} == set(itertools.product((1, 2, 4), repeat=2))
    assert document["unchecked"] == ["qwen3.5-0.8b: not checked at TP 3: SGLang 0.5.23 does not serve it there"]
    wrong = run_cli("check", "--engine", "sglang", "--model", "nemotron-h-8b", "--pairs", "1:2,2:2")
    assert wrong.code == 1, wrong.stderr
    text = words(wrong.stdout)
    assert "SGLang 0.5.23 corrupts the conv state of nemotron-h-8b at P TP 1 → D TP 2: 811,008 bytes wrong" in text
    assert "2 pairings checked byte by byte" in text and "1 right, 1 corrupted by SGLang 0.5.23" in text
    assert "mambaxfer's exact plan right on every one" in text


def test_a_ratio_that_is_no_multiple_fails_its_requests_and_names_the_rank_nobody_reads():
    result = run_cli("check", "--engine", "sglang", "--model", "mamba-130m", "--pairs", "3:2", "--format", "json")
    assert result.code == 1
    (pairing,) = json.loads(result.stdout)["pairings"]
    assert pairing["outcome"] == FAILS
    assert pairing["findings"] == ["no decode rank reads prefill rank 2 (P TP 3)"]
    assert pairing["sentence"].startswith("SGLang 0.5.23 fails every request of mamba-130m at P TP 3 → D TP 2")


@pytest.mark.parametrize("model", [m.name for m in served_presets()])
def test_simulated_bytes_agree_with_the_verdict_and_the_exact_plan_is_right(model):
    """check_pairing raises when the bytes it moves disagree with the verdict's count."""
    spec = next(m for m in served_presets() if m.name == model)     # read as SGLang starts it
    sizes = tp_sizes(spec, 4)
    for p_tp, d_tp in itertools.product(sizes, sizes):
        result = check_pairing(spec, p_tp, d_tp)
        assert result.exact_wrong() == 0, (p_tp, d_tp)
        assert result.wrong() == result.plan.verdict.bad_bytes()


def test_a_planted_fault_in_the_exact_plan_fails(monkeypatch):
    """One exact write shifted by a byte: the simulation sees mambaxfer's plan wrong."""
    real = writes_module.exact_writes

    def shifted(prefill, decode):
        first, *rest = real(prefill, decode)
        return (StateWrite(first.field, first.d_rank, first.p_rank, first.src + 1, first.dst, first.length - 1),
                *rest)

    import importlib

    # The module, not the package's function of the same name.
    monkeypatch.setattr(importlib.import_module("mambaxfer_cli.engines.sglang.plan"), "exact_writes", shifted)
    result = check_pairing(load_model("qwen3.5-0.8b"), 2, 1)
    assert result.outcome == FAIL and result.exact_wrong() > 0


def test_bytes_moved_from_the_wrong_place_count_even_where_values_repeat():
    """A write from the right rank but the neighbouring slot lands bytes that are all wrong."""
    spec = plan(load_model("qwen3.5-0.8b"), 1, 1).model
    p, d = check_side(spec, 1), check_side(spec, 1)
    size = p.layouts()[0].conv_bytes
    moved = [StateWrite("conv", 0, 0, size, 0, size)]   # the next request's slot
    (conv, temporal) = outcomes(moved, p, d)
    assert conv.wrong == size and conv.missing == 0
    assert temporal.missing == temporal.item_bytes


def test_side_by_side_names_both_engines_outcomes():
    result = run_cli("check", "--engine", "vllm,sglang", "--model", "granite-4.0-h-tiny", "--pairs", "1:2,1:1",
                     env={"COLUMNS": "80"})
    assert result.code == 1, result.stderr
    assert max(map(len, result.stdout.splitlines())) <= 80
    text = words(result.stdout)
    assert "vLLM 0.34 and SGLang 0.5.23" in text
    assert "SGLang 0.5.23 corrupts the conv state of granite-4.0-h-tiny at P TP 1 → D TP 2: 442,368 bytes wrong" in text
    assert "2 pairings: vLLM 0.34 moves 1 of 2 right, SGLang 0.5.23 1 of 2" in text
    document = json.loads(run_cli("check", "--engine", "vllm,sglang", "--model", "granite-4.0-h-tiny", "--pairs",
                                  "1:1", "--format", "json").stdout)
    assert document["ok"] and document["vllm"]["ok"] and document["sglang"]["ok"]


def test_inspect_shows_sglang_state_shapes():
    result = run_cli("inspect", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--tp", "1,2")
    assert result.code == 0, result.stderr
    text = words(result.stdout)
    assert "SGLang at TP 2: conv state 3072 × 3 (bfloat16), sharded in groups [2048, 2048, 2048]" in text
    assert "temporal 8 × 128 × 128 (float32)" in text


def test_all_presets_leave_out_what_sglang_does_not_serve():
    result = run_cli("check", "--engine", "sglang", "--all-presets", "--max-tp", "2", "--format", "json")
    assert result.code == 1, result.stderr     # the Mamba2 presets corrupt at 1:2
    document = json.loads(result.stdout)
    assert "jamba: SGLang 0.5.23 has no Jamba model file" in document["unchecked"]
    assert "jamba" not in {p["model"] for p in document["pairings"]}
    assert "kimi-linear-48b" in {p["model"] for p in document["pairings"]}


@pytest.mark.parametrize("args, fragments", [
    (("plan", "--engine", "sglang", "-m", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2", "--block-size", "64"),
     ("--block-size", "vLLM's option", "--engine sglang does not read it")),
    (("plan", "--engine", "sglang", "-m", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2", "--ssm-dtype", "bfloat16"),
     ("--ssm-dtype", "SGLang sets its state dtypes")),
    (("plan", "--engine", "sglang", "-m", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2", "--transfer-backend", "tcp"),
     ("--transfer-backend", "nixl, mooncake")),
    (("plan", "-m", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2", "--transfer-backend", "mooncake"),
     ("--transfer-backend: SGLang's option",)),
    (("check", "--engine", "sglang", "-m", "qwen3.5-0.8b", "--pairs", "1:2", "--request-blocks", "4"),
     ("--request-blocks", "SGLang moves one slot per request")),
])
def test_what_sglang_does_not_take_is_one_line(args, fragments):
    result = run_cli(*args)
    assert_user_error(result, *fragments)
    assert len(messages(result.stderr.strip())) == 1 and result.stdout == ""


@pytest.mark.parametrize("args, fragments", [
    (("plan", "--engine", "sglang", "-m", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "3"),
     ("SGLang 0.5.23 cannot serve it at TP 3",)),
    (("check", "--engine", "sglang", "-m", "jamba"), ("SGLang 0.5.23 has no Jamba model file",)),
])
def test_what_sglang_does_not_start_is_its_refusal_and_exit_1(args, fragments):
    assert_refused(run_cli(*args), *fragments)


def test_mooncake_is_planned_for_the_same_pairing():
    result = run_cli("plan", "--engine", "sglang", "-m", "qwen3.5-0.8b", "--p-tp", "2", "--d-tp", "1",
                     "--transfer-backend", "mooncake", "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["backend"] == "mooncake" and document["verdict"]["right"]


def test_an_architecture_sglang_has_no_class_for_is_refused_in_sglang_s_words(tmp_path):
    """GLM-5-Next's Glm5NextForCausalLM, which vLLM serves, is in no srt/models/ file's EntryClass."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**compiled_presets()["glm-5-next"]["config"],
                                  "architectures": ["Glm5NextForCausalLM"]}))
    for command in (("plan", "--p-tp", "1", "--d-tp", "2"), ("check", "--pairs", "1:2")):
        result = run_cli(command[0], "--engine", "sglang", "--model", str(config), *command[1:])
        assert_refused(result, "SGLang 0.5.23 has no model class Glm5NextForCausalLM")
        assert "vLLM" not in result.stderr
    vllm = run_cli("plan", "--model", str(config), "--p-tp", "1", "--d-tp", "2", "--block-size", "4608")
    assert vllm.code == 0, vllm.stderr


def test_kimi_k3_is_planned_as_sglang_lays_it_out():
    # KimiK3Config's text_config is a KimiLinearConfig: KimiLinearStateShape at the attention TP
    # size, conv (K-1, dim) with one block per row, layers linear_layer_ids (i + 1 in kda_layers).
    config = Path(__file__).with_name("fixtures") / "hf-configs" / "kimi-k3.example.json"
    result = run_cli("plan", "--engine", "sglang", "--model", str(config), "--p-tp", "1", "--d-tp", "2",
                     "--format", "json")
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    conv = [e for e in document["entries"]["decode"] if e["field"] == "conv"]
    kda = json.loads(config.read_text())["text_config"]["linear_attn_config"]["kda_layers"]
    assert [e["layer_id"] for e in conv] == [i - 1 for i in kda]
    assert {(e["item_len"], e["dim"], e["outer_count"]) for e in conv} == {(3 * 18432 * 2, 18432, 3)}
    assert document["verdict"]["right"] and "vLLM" not in result.stdout + result.stderr
