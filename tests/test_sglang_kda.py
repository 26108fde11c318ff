"""KDA under --engine sglang (Kimi-Linear, Kimi-K3, Bailing-V3), as SGLang 0.5.23's config classes
and pools lay it out: KimiLinearStateShape's (K-1, dim) conv, the config's linear_layer_ids,
Bailing-V3's own head_dim and layer types, and the MLA latent pages (MLATokenToKVPool)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from cli_run import assert_refused, run_cli
from mambaxfer_cli.engines.sglang.kv import LATENT, KVSide, exact_kv_writes, kv_entries, sglang_kv_writes
from mambaxfer_cli.engines.sglang.plan import plan
from mambaxfer_cli.engines.sglang.proof import outcomes
from mambaxfer_cli.engines.sglang.shapes import sglang_model, state_shape
from mambaxfer_cli.engines.sglang.writes import check_side, compare, exact_writes, sglang_writes
from mambaxfer_cli.readers.model_source import load_model

CONFIGS = Path(__file__).with_name("fixtures") / "hf-configs"


def _bailing(tmp_path: Path, **changes) -> str:
    config = {**json.loads((CONFIGS / "bailing-v3.example.json").read_text()), **changes}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return str(tmp_path / "config.json")


def test_kimi_linear_entries_carry_sglang_s_layer_ids_and_transposed_conv():
    planned = plan(load_model("kimi-linear-48b"), 1, 2)
    kda = [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26]   # its config's kda_layers
    conv = [e for e in planned.decode_entries if e.field == "conv"]
    assert [e.layer_id for e in conv] == [i - 1 for i in kda]            # KimiLinearConfig.linear_layer_ids
    assert {(e.item_len, e.dim, e.outer_count, e.conv_shard_groups) for e in conv} == {
        (3 * 6144 * 2, 6144, 3, (4096, 4096, 4096))}
    assert planned.verdict.right


def test_bailing_v3_takes_its_own_head_dim_and_sglang_s_layer_types(tmp_path):
    # BailingHybridConfig: KimiLinearStateShape.create(num_attention_heads, head_dim) and MLA on
    # every layer_group_size-th layer only; vLLM reads qk_rope_head_dim and makes the tail MLA.
    path = _bailing(tmp_path, num_hidden_layers=40)          # 6 whole groups and 4 layers past them
    model = load_model(path)
    assert model.params["head_dim"] == 64 and model.layers[36:] == ("attention",) * 4   # vLLM's reading
    spec = sglang_model(model)
    assert state_shape(spec, 2).temporal == (16, 128, 128)
    assert spec.layers[36:] == ("ssm",) * 4 and spec.ssm_layer_ids[-4:] == (36, 37, 38, 39)
    assert spec.head_size == 512 + 64
    assert sglang_model(load_model(_bailing(tmp_path, use_mla_nope=True))).head_size == 512


def test_a_tp_size_kda_heads_do_not_divide_is_sglang_s_refusal():
    result = run_cli("plan", "--engine", "sglang", "--model", "kimi-linear-48b", "--p-tp", "1", "--d-tp", "3")
    assert_refused(result, "KDA num_heads (32) must be divisible by shard tp_size (3)")


def test_conv_rows_swapped_on_the_decode_side_are_caught():
    spec = sglang_model(load_model("kimi-linear-48b"))
    p, d = check_side(spec, 1), check_side(spec, 2)
    exact = exact_writes(p, d)
    assert sum(o.bad for o in compare(exact, p, d)) == 0 and sum(o.bad for o in outcomes(exact, p, d)) == 0
    row = d.entry("conv").item_len // 3
    # rows 0 and 1 of each decode item written the other way round: their bytes are all wrong
    swapped = tuple(replace(w, dst=(w.dst + row) % (2 * row)) if w.field == "conv" and w.dst < 2 * row else w
                    for w in exact)
    assert sum(o.wrong for o in compare(swapped, p, d)) == 2 * 2 * row
    assert sum(o.wrong for o in outcomes(swapped, p, d)) == 2 * 2 * row
    assert sum(o.bad for o in compare(sglang_writes(p, d), p, d)) == 0


def test_mla_latent_pages_move_whole_from_every_writer():
    spec = sglang_model(load_model("kimi-linear-48b"))
    prefill, decode = KVSide(spec, 2, 4), KVSide(spec, 1, 4)
    entries = kv_entries(decode)
    assert {e.field for e in entries} == {LATENT} and len(entries) == 7
    assert {e.item_len for e in entries} == {4 * (512 + 64) * 2}              # MLATokenToKVPool, bfloat16
    assert sglang_kv_writes(prefill, decode, ()) == tuple(
        (w := exact_kv_writes(prefill, decode)[0]) and replace(w, p_rank=p) for p in (0, 1))
    assert plan(load_model("kimi-linear-48b"), 2, 1).head_slices == ()


def test_execute_moves_kimi_s_state_and_latents_as_check_predicts():
    result = run_cli("execute", "--engine", "sglang", "--model", "kimi-linear-48b", "--p-tp", "2", "--d-tp", "1",
                     "--device", "cpu", "--layers", "4", "--format", "json", timeout=300)
    assert result.code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["verified"] and document["bad_bytes"] == document["predicted_bad_bytes"] == 0
    assert document["attention"]["layers"] == 1 and document["attention"]["head_bytes"] == (512 + 64) * 2


def test_check_beside_vllm_keeps_both_columns_for_kimi_linear():
    result = run_cli("check", "--engine", "vllm,sglang", "--model", "kimi-linear-48b", "--max-tp", "2",
                     "--format", "json")
    document = json.loads(result.stdout)
    assert len(document["vllm"]["results"]) == 4 and not document["vllm"]["ok"]    # vLLM refuses 1:2 and 2:1
    assert len(document["sglang"]["pairings"]) == 4 and document["sglang"]["unchecked"] == []
    assert {p["outcome"] for p in document["sglang"]["pairings"]} == {"right"} and result.code == 1
