"""GLM-5-Next under --engine sglang, as SGLang 0.5.23 keeps it (checked against its own classes on the
preset's config): ``Glm5NextTextConfig.mamba2_cache_params`` is ``KimiLinearStateShape.create`` over
``linear_attn_config``'s 64 heads of 128 at the attention TP size, layers ``linear_layer_ids``, the
0-based ``kda_layers`` (from ``i % 4 != 3`` without ``linear_attn_config``: 0, 1, 2, 4, ... of 45)."""

from __future__ import annotations

import json

import pytest

from mambaxfer_cli.readers.model_source import compiled_presets
from test_sglang_conformance import ROLLED_KDA, run_in_sglang



def _config(tmp_path, **text) -> str:
    config = json.loads(json.dumps(compiled_presets()["glm-5-next"]["config"]))
    config["text_config"].update(text)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_plan_moves_the_kda_state_of_sglang_s_linear_layers(cli):
    code, out, err = cli("plan", "--engine", "sglang", "--model", "glm-5-next", "--p-tp", "1", "--d-tp", "2",
                         "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    conv = [e for e in document["entries"]["decode"] if e["field"] == "conv"]
    assert [e["layer_id"] for e in conv] == [i for i in range(45) if i % 4 != 3]
    # (K-1, 3 · 64 · 128 / TP) bf16, sliced on axis 1 in three groups; (64 / TP, 128, 128) float32
    assert (conv[0]["item_len"], conv[0]["dim"], conv[0]["outer_count"], conv[0]["conv_shard_groups"]) == \
        (3 * 12288 * 2, 12288, 3, [8192, 8192, 8192])
    temporal = [e for e in document["entries"]["decode"] if e["field"] == "temporal"]
    assert temporal[0]["item_len"] == 32 * 128 * 128 * 4 and document["dtypes"]["temporal"] == "float32"
    key = lambda w: sorted(w.items())  # noqa: E731
    assert document["verdict"]["right"] and sorted(document["writes"], key=key) == sorted(document["exact"], key=key)


def test_plan_lists_its_dsa_pool_s_latent_and_index_key_entries(cli):
    code, out, err = cli("plan", "--engine", "sglang", "--model", "glm-5-next", "--p-tp", "2", "--d-tp", "1",
                         "--format", "json")
    pool = json.loads(out)["dsa_pool"]
    assert code == 0 and pool["page_size"] == 1024, err
    assert [(e["field"], e["layer_id"], e["item_len"]) for e in pool["entries"]] == \
        [("kv", i, 1 << 20) for i in range(3, 45, 4)] + [("index_k", i, 8448) for i in range(3, 45, 4)]
    code, out, _ = cli("plan", "--engine", "sglang", "--model", "glm-5-next", "--p-tp", "2", "--d-tp", "1")
    assert "11 MLA latent entries of 1,048,576 B and as many DSA index-key entries of 8,448 B" in " ".join(out.split())


def test_its_kda_layers_are_zero_based_as_sglang_s_config_class_reads_them(cli, tmp_path):
    # Glm5NextTextConfig.is_kda_layer: layer_idx in kda_layers (Kimi's is i + 1 in kda_layers).
    attn = {"num_heads": 64, "head_dim": 128, "short_conv_kernel_size": 4, "kda_layers": [1, 2, 5, 7, 40],
            "full_attn_layers": []}
    code, out, err = cli("plan", "--engine", "sglang", "--model", _config(tmp_path, linear_attn_config=attn),
                         "--p-tp", "2", "--d-tp", "1", "--format", "json")
    assert code == 0, err
    assert sorted({e["layer_id"] for e in json.loads(out)["entries"]["prefill"]}) == [1, 2, 5, 7, 40]


def test_the_kpool_compress_tail_ring_is_not_modelled(cli, tmp_path):
    code, _, err = cli("check", "--engine", "sglang", "--model", _config(tmp_path, index_kpool_compress=True),
                       "--pairs", "1:2")
    assert code == 2 and "StateType.DSA_TAIL" in err and "Traceback" not in err, err


@pytest.mark.usefixtures("nixl")
def test_execute_moves_its_state_and_mla_latents_as_sglang_writes_them():
    from cli_run import run_json

    code, doc = run_json("execute", "--engine", "sglang", "--device", "cpu", "--format", "json", "--timeout", "90",
                         "--model", "glm-5-next", "--layers", "4", "--p-tp", "1", "--d-tp", "2", "--iters", "1")
    assert code == 0 and doc["verified"] and doc["bad_bytes"] == doc["predicted_bad_bytes"] == 0, doc
    assert {f["field"] for d in doc["decode"] for f in d["fields"]} >= {"conv", "temporal", "kv", "index_k"}
    # DSATokenToKVPool at SGLang's page of 64 · index_kpool (16) tokens: a latent of kv_lora_rank 512 +
    # qk_rope_head_dim 0 bf16 per token; 1024 / 16 pooled index keys of 128 fp8 bytes + one float32 scale.
    assert doc["attention"]["page_size"] == 1024 and doc["attention"]["buffers"] == \
        {"kv": 1024 * 512 * 2, "index_k": 64 * (128 + 4)}, doc["attention"]
    import jsonschema
    from mambaxfer_cli.schema import document_schema
    jsonschema.Draft202012Validator(document_schema("sglang-execute")).validate(doc)   # its fields, kv's too


@pytest.mark.usefixtures("nixl")
def test_execute_says_it_moves_the_latent_and_index_keys_not_k_and_v():
    from cli_run import run_cli

    result = run_cli("execute", "--engine", "sglang", "--device", "cpu", "--timeout", "90", "--model", "glm-5-next",
                     "--layers", "4", "--p-tp", "2", "--d-tp", "1", "--iters", "1")
    caption = " ".join(result.stdout.split())
    assert result.code == 0 and "K and V" not in caption, result.stdout
    assert "MLA latent (1,048,576 B) and DSA index keys (8,448 B) of 1 attention layer: slot = page of 1024" \
        in caption, result.stdout


def test_index_keys_move_whole_from_every_writer_and_a_wrong_one_is_seen():
    from mambaxfer_cli.engines.sglang.kv import INDEX_K, KVSide, exact_kv_writes, kv_entries, sglang_kv_writes
    from mambaxfer_cli.engines.sglang.shapes import sglang_model
    from mambaxfer_cli.readers.model_source import load_model

    model = sglang_model(load_model("glm-5-next"))
    p, d = KVSide(model, 2, 1024), KVSide(model, 1, 1024)
    assert [(e.field, e.item_len) for e in kv_entries(d)] == [("kv", 1 << 20)] * 11 + [(INDEX_K, 8448)] * 11
    ours = [w for w in sglang_kv_writes(p, d, ()) if w.field == INDEX_K]
    assert [(w.p_rank, w.src, w.dst, w.length) for w in ours] == [(0, 0, 0, 8448), (1, 0, 0, 8448)]
    assert [w for w in exact_kv_writes(p, d) if w.field == INDEX_K] == ours[:1]
    # every rank's page holds the same keys; another layer's or block's would not
    page = d.rank(0).page(INDEX_K, 3, 7)
    assert (page == p.rank(1).page(INDEX_K, 3, 7)).all() and (page != d.rank(0).page(INDEX_K, 3, 8)).any()
    assert (page != d.rank(0).page("kv", 3, 7)[:8448]).any()


def test_models_says_mambaxfer_answers_for_it(cli):
    code, out, err = cli("models", "--engine", "sglang", "--format", "json")
    row = next(r for r in json.loads(out)["models"] if r["name"] == "glm-5-next")
    assert code == 0 and row["sglang_file"] == "models/glm5_next.py" and row["answered"], row


# Its own mixer in SGLang's environment: Glm5NextLinearAttention built per rank on the CPU, and the
# same with its conv channels rolled by one, which conformance must catch in that row alone.
PROBE = r"""
import json, sys
from mambaxfer_cli.engines.sglang import conformance as c
from mambaxfer_cli.engines.sglang.conformance import served_model

name = "Glm5NextLinearAttention conv channels"
base = c.load_functions()
""" + ROLLED_KDA + r"""
out = {}
for label, functions in (("as is", base), ("rolled", {**base, name: rolled_kda_channels(base[name])})):
    report = c.probe([served_model("glm-5-next")], functions, max_tp=2)
    out[label] = {r.name: [r.outcome, r.cases] for r in report.results}
try:       # its 64 heads at TP 3, built as conformance builds it
    c._their_kda_channels(base[name], served_model("glm-5-next"), 3, 0, c.KDA_MIXERS["GLM-5-Next"][3:])
    out["tp 3"] = "built"
except AssertionError as error:
    out["tp 3"] = ["AssertionError", str(error)]
print(json.dumps(out))
"""


def test_conformance_builds_its_own_mixer_and_catches_a_planted_fault():
    result = run_in_sglang("-c", PROBE)
    assert result.returncode == 0, result.stderr[-3000:]
    outcomes = json.loads(result.stdout)
    row = "Glm5NextLinearAttention conv channels"
    assert outcomes["as is"][row] == ["agrees", 3]          # TP 1 rank 0, TP 2 ranks 0 and 1
    assert {o for o, _ in outcomes["as is"].values()} == {"agrees"}
    assert {n for n, (o, _) in outcomes["rolled"].items() if o != "agrees"} == {row}
    assert outcomes["tp 3"] == ["AssertionError", ""]       # a bare assert: mambaxfer's refusal names it


def test_a_tp_size_that_does_not_divide_its_heads_is_sglang_s_bare_assert(cli):
    code, _, err = cli("plan", "--engine", "sglang", "--model", "glm-5-next", "--p-tp", "3", "--d-tp", "2")
    assert code == 1 and "AssertionError in Glm5NextLinearAttention.__init__" in " ".join(err.split()), err
    code, _, err = cli("plan", "--engine", "sglang", "--model", "kimi-linear-48b", "--p-tp", "3", "--d-tp", "1")
    assert code == 1 and "KDA num_heads (32) must be divisible by shard tp_size (3)" in " ".join(err.split()), err


@pytest.mark.parametrize("kpool,page", [(16, 1024), (None, 64)])
def test_preflight_takes_the_page_size_sglang_sets_for_its_dsa_pool(cli, tmp_path, kpool, page):
    # _deepseek_family_overrides (is_deepseek_dsa) sets --page-size to 64 · index_kpool on CUDA: two lines
    # asking for different page sizes both run its pages, which the bootstrap finds equal. Without the
    # key SGLang's get_dsa_index_kpool takes 1 (its config class has no default; transformers' is 16).
    config = json.loads(open(_config(tmp_path)).read())
    config["text_config"]["index_kpool"] = kpool
    if kpool is None:
        del config["text_config"]["index_kpool"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    line = ("python -m sglang.launch_server --model-path {} --tp {} --disaggregation-mode {} "
            "--disaggregation-transfer-backend nixl --page-size {}")
    code, out, err = cli("preflight", "--prefill", line.format(tmp_path, 1, "prefill", 1),
                         "--decode", line.format(tmp_path, 2, "decode", 16), "--format", "json")
    assert code == 0, err + out
    document = json.loads(out)
    assert document["verdict"] == "works", document
    assert {s["page_size"] for s in document["engines"].values()} == {page}
