"""mambaxfer preflight end to end: real vllm serve command lines in, the vLLM release's verdict, the
byte-level check and the corrected lines out (exit 0 works, 1 refused or corrupt, 2 usage)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import jsonschema
import pytest

from cli_run import assert_user_error, messages, run_cli
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.preflight.report import preflight
from mambaxfer_cli.preflight.report import quote_lines
from mambaxfer_cli.schema import document_schema
from mambaxfer_cli.engines.vllm.serve_args import parse_serve
from mambaxfer_cli.readers.model_source import load_model

ROOT = Path(__file__).resolve().parents[1]
DS = "VLLM_SSM_CONV_STATE_LAYOUT=DS"
P_KV = """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'"""
D_KV = """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'"""


def lines(model: str, p_flags: str = "", d_flags: str = "", p_env: str = DS, d_env: str = DS) -> tuple[str, str]:
    return (f"{p_env} vllm serve {model} --port 8100 {p_flags} {P_KV}".strip(),
            f"{d_env} vllm serve {model} --port 8200 {d_flags} {D_KV}".strip())


def run_json(p: str, d: str, *extra: str):
    result = run_cli("preflight", "--prefill", p, "--decode", d, "--format", "json", *extra)
    assert "Traceback" not in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, document_schema("preflight"))
    assert doc["exit_code"] == result.code
    return result.code, doc


def check_fix_works(doc) -> None:
    """The corrected lines, run through preflight again for the same releases, work (exit 0)."""
    versions = doc["vllm_versions"]
    code, again = run_json(doc["fix"]["prefill"], doc["fix"]["decode"], "--p-vllm-version", versions["prefill"],
                           "--d-vllm-version", versions["decode"])
    assert code == 0, again["headline"]
    assert again["verdict"] == "works" and again["fix"] is None


def test_the_hashed_layer_count_is_the_configs_num_hidden_layers():
    """compute_nixl_compatibility_hash takes get_total_num_hidden_layers, the config's
    num_hidden_layers: Nemotron-H-8B's 52 decoder layers, of which 28 keep a cache (24 Mamba, 4
    attention; the rest are MLP layers)."""
    p, d = lines("nvidia/Nemotron-H-8B-Base-8K", "--tensor-parallel-size 1", "--tensor-parallel-size 2")
    code, doc = run_json(p, d)
    layers = next(f for f in doc["compared"] if f["field"] == "layers")
    assert (layers["prefill"], layers["decode"], layers["agree"]) == (52, 52, True), layers
    from mambaxfer_cli.readers.model_source import load_model
    model = load_model("nemotron-h-8b")
    assert (len(model.layers), model.hashed_layers) == (28, 52)


def test_nemotron_h_p_tp1_d_tp2_works():
    p, d = lines("nvidia/Nemotron-H-8B-Base-8K", "--tensor-parallel-size 1", "--tensor-parallel-size 2")
    code, doc = run_json(p, d)
    assert code == 0 and doc["verdict"] == "works"
    assert doc["vllm"]["accepts"] and doc["byte_check"]["verdict"] == "pass"
    assert doc["byte_check"]["bytes_verified"] > 0 and doc["fix"] is None
    assert doc["engines"]["prefill"]["ssm_dtype"] == "float32"     # Nemotron-H's hook in vLLM 0.33
    assert doc["engines"]["decode"]["tp"] == 2
    assert "--port" in doc["engines"]["prefill"]["ignored_flags"]
    table = run_cli("preflight", "--prefill", p, "--decode", d, env={"COLUMNS": "80"})
    assert table.code == 0 and table.stdout.startswith("WORKS")
    assert "P model: nvidia/Nemotron-H-8B-Base-8K" in table.stdout      # whole, not folded mid-word
    assert max(map(len, table.stdout.splitlines())) <= 80


def test_qwen35_p_tp1_d_tp4_default_flags_is_refused_and_block_size_144_fixes_it():
    p, d = lines("Qwen/Qwen3.5-0.8B", "", "-tp 4")
    code, doc = run_json(p, d)
    assert code == 1 and doc["verdict"] == "refused"
    # vLLM 0.33's default prefix caching: GDN checkpoints align blocks to 64 tokens (576 and 320).
    assert doc["engines"]["prefill"]["geometry"]["block_size"] == 576
    assert doc["engines"]["decode"]["geometry"]["block_size"] == 320
    assert doc["vllm"]["refusals"][0]["message"] == (
        "Local block size 320 is not divisible by remote block size 576 or vice versa.")
    assert doc["vllm"]["suggested_block_size"] == 144   # as 'mambaxfer plan --semantics vllm' says
    changes = {(c["side"], c["flag"], c["new"]) for c in doc["fix"]["changes"]}
    assert changes == {("prefill", "--block-size", "144"), ("decode", "--block-size", "144")}
    assert "--block-size 144" in doc["fix"]["decode"] and "-tp 4" in doc["fix"]["decode"]
    check_fix_works(doc)


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_prefix_caching_with_different_blocks_per_logical_flashinfer(version):
    p, d = lines("Qwen/Qwen3.5-0.8B", "--attention-backend FLASHINFER", "-tp 4 --attention-backend FLASHINFER")
    code, doc = run_json(p, d, "--vllm-version", version)
    assert code == 1 and doc["vllm_versions"] == {"prefill": version, "decode": version}
    g = doc["engines"]
    assert (g["prefill"]["geometry"]["kernel_block_size"], g["prefill"]["geometry"]["blocks_per_logical"]) == (64, 9)
    assert (g["decode"]["geometry"]["kernel_block_size"], g["decode"]["geometry"]["blocks_per_logical"]) == (64, 5)
    assert [r["code"] for r in doc["vllm"]["refusals"]] == ["prefix-caching"]
    assert "Local: 5, Remote: 9" in doc["vllm"]["refusals"][0]["message"]
    off = [x.replace("--port", "--no-enable-prefix-caching --port") for x in (p, d)]
    code, off_doc = run_json(*off, "--vllm-version", version)
    if version == "0.33":
        # Turning prefix caching off alone leaves kernels of 32 and 16 tokens (refused): the fix is the
        # block size.
        assert {c["flag"] for c in doc["fix"]["changes"]} == {"--block-size"}
        check_fix_works(doc)
        assert code == 1 and off_doc["vllm"]["refusals"][0]["message"] == (
            "Local block size 16 is not divisible by remote block size 32 or vice versa.")
    else:
        # 0.34 starts from 64 tokens: 576 = 9·64 and 320 = 5·64 without prefix caching too, accepted
        # (blocks pair from the last token: the proxy must forward remote_num_tokens).
        assert code == 0 and off_doc["verdict"] == "works", off_doc["headline"]
        assert any("remote_num_tokens" in w for w in off_doc["warnings"])


def test_ssm_dtype_mismatch_passes_vllm_and_corrupts_state():
    p, d = lines("nvidia/Nemotron-H-8B-Base-8K", "--block-size 2048 --mamba-ssm-cache-dtype bfloat16",
                 "-tp 2 --block-size 2048")
    code, doc = run_json(p, d)
    assert code == 1 and doc["verdict"] == "corrupt"
    assert doc["vllm"]["accepts"]                    # the hash and the handshake do not compare it
    ssm = next(f for f in doc["not_compared"] if f["field"] == "SSM (temporal) dtype")
    assert (ssm["prefill"], ssm["decode"], ssm["agree"]) == ("bfloat16", "float32", False)
    assert all(f["agree"] for f in doc["compared"])
    assert doc["byte_check"]["verdict"] == "fail" and doc["byte_check"]["wrong_bytes"] > 0
    # At TP 2: conv (128·64 + 2·8·128)/2 channels × 3 rows × 2 B = 30720; temporal 64 heads × 64 × 128
    # × 2 B (bfloat16) = 1048576 on P, × 4 B (float32) = 2097152 on D.
    assert doc["unchecked_mismatches"] == ["SSM (temporal) dtype: P bfloat16, D float32",
                                           "SSM state bytes per rank (at D's TP): P 30720 + 1048576, D 30720 + 2097152"]
    assert [(c["side"], c["flag"], c["new"]) for c in doc["fix"]["changes"]] == [
        ("decode", "--mamba-ssm-cache-dtype", "bfloat16")]
    check_fix_works(doc)
    table = run_cli("preflight", "--prefill", p, "--decode", d, env={"COLUMNS": "80"})
    assert table.code == 1
    words = " ".join(table.stdout.split())
    assert words.startswith("CORRUPT: P and D differ in SSM (temporal) dtype (P bfloat16, D float32), which "
                            "vLLM's handshake does not compare")


def test_granite_p_tp1_d_tp2_vllm_reads_corrupt_bc():
    p, d = lines("ibm-granite/granite-4.0-h-tiny", "", "-tp 2")
    code, doc = run_json(p, d)
    assert code == 1 and doc["verdict"] == "corrupt" and doc["vllm"]["accepts"]
    explained = " ".join(doc["byte_check"]["explanation"])
    assert "C channel" in explained or "B channel" in explained
    assert any(w["code"] == "vllm-replicated-groups" for w in doc["plan_warnings"])
    assert doc["unchecked_mismatches"] == []          # no flag differs: vLLM's own offsets are wrong
    assert "B/C groups (n_groups=1) are replicated on the D ranks" in doc["headline"]
    # No flag fixes vLLM's offsets for one replicated group: only the same TP on both sides does.
    assert [(c["side"], c["flag"], c["new"]) for c in doc["fix"]["changes"]] == [
        ("prefill", "--tensor-parallel-size", "2")]
    check_fix_works(doc)


def test_conv_layout_missing_on_one_side(tmp_path):
    p, d = lines("nvidia/Nemotron-H-8B-Base-8K", "", "-tp 2", d_env="")
    code, doc = run_json(p, d)
    assert code == 1 and doc["verdict"] == "refused"
    assert [r["code"] for r in doc["vllm"]["refusals"]] == ["conv-layout"]
    assert "D: VLLM_SSM_CONV_STATE_LAYOUT is unset" in doc["vllm"]["refusals"][0]["message"]
    assert [(c["side"], c["flag"], c["new"]) for c in doc["fix"]["changes"]] == [
        ("decode", "VLLM_SSM_CONV_STATE_LAYOUT", "DS")]
    assert doc["fix"]["decode"].startswith("VLLM_SSM_CONV_STATE_LAYOUT=DS vllm serve")
    check_fix_works(doc)
    junit = tmp_path / "preflight.xml"
    result = run_cli("preflight", "--prefill", p, "--decode", d, "--junit", str(junit))
    assert result.code == 1
    assert 'failures="1"' in junit.read_text() and "conv-layout" in junit.read_text()


def test_script_files_with_exports_continuations_and_quotes(tmp_path):
    prefill = tmp_path / "prefill.sh"
    prefill.write_text(
        "#!/bin/bash\nset -e\nexport VLLM_SSM_CONV_STATE_LAYOUT=DS\n"
        "CUDA_VISIBLE_DEVICES=0 vllm serve nvidia/Nemotron-H-8B-Base-8K \\\n"
        "    --tensor-parallel-size=1 --gpu_memory_utilization 0.9 \\\n"
        f"    {P_KV}\n")
    decode = tmp_path / "decode.sh"
    decode.write_text(
        "export VLLM_SSM_CONV_STATE_LAYOUT=DS\n"
        "exec python -m vllm.entrypoints.openai.api_server --model nvidia/Nemotron-H-8B-Base-8K -tp 2 \\\n"
        "  --kv-transfer-config.kv_connector NixlConnector --kv-transfer-config.kv_role kv_consumer\n")
    result = run_cli("preflight", "--prefill-file", str(prefill), "--decode-file", str(decode), "--format", "yaml")
    assert result.code == 0, result.stdout + result.stderr
    assert "verdict: works" in result.stdout


@pytest.mark.parametrize("prefill, fragment", [
    ("vllm serve qwen3.5-0.8b --kv-transfer-config '{\"kv_role\": ", "unclosed quote"),
    ("vllm serve qwen3.5-0.8b -tp four", "--tensor-parallel-size expects an integer"),
    ("python serve.py --model qwen3.5-0.8b", "no 'vllm serve MODEL"),
    ("vllm serve qwen3.5-0.8b --kv-transfer-config '{not json}'", "--kv-transfer-config is not valid JSON"),
    ("vllm serve qwen3.5-0.8b --dtype float8", "--dtype: invalid choice"),
    ("vllm serve no-such-model", "unknown model 'no-such-model'"),
    ("vllm serve qwen3.5-0.8b --block-size", "--block-size expects a value"),
])
def test_malformed_lines_are_one_line_usage_errors(prefill, fragment):
    d = lines("qwen3.5-0.8b", "", "-tp 4")[1]
    result = run_cli("preflight", "--prefill", prefill, "--decode", d)
    assert_user_error(result, fragment)
    assert len(messages(result.stderr.strip())) == 1 and result.stdout == ""


def test_parser_reads_vllm_spellings():
    line = parse_serve("FOO=1 vllm serve m -tp=2 --block_size 32 --disable-prefix-caching --no-such-flag 3 "
                       "--enable-eplb --speculative-config '{\"method\":\"mtp\",\"num_speculative_tokens\":2}' "
                       "--mamba-ssm-cache-dtype=float32 --served-model-name a b --port 1")
    assert (line.model, line.tp, line.block_size, line.prefix_caching) == ("m", 2, 32, False)
    assert (line.num_speculative_tokens, line.speculative_method) == (2, "mtp")
    assert line.mamba_ssm_cache_dtype == "float32" and line.env_prefix == (("FOO", "1"),)
    assert line.unknown == ("--no-such-flag",)
    assert set(line.ignored) == {"--enable-eplb", "--served-model-name", "--port"}
    # EnableDisableAction (vLLM's utils/argparse_utils.py) registers --enable-x, --disable-x and the hidden
    # --no-enable-x; vLLM 0.33 and 0.34 answer --no-disable-prefix-caching with 'unrecognized arguments'.
    assert parse_serve("vllm serve m --no-enable-prefix-caching").prefix_caching is False
    assert parse_serve("vllm serve m --no-disable-prefix-caching").unknown == ("--no-disable-prefix-caching",)
    with pytest.raises(UserError, match="takes no value"):
        parse_serve("vllm serve m --enable-prefix-caching=yes")


def test_unexported_conv_layout_is_not_seen():
    line = parse_serve("VLLM_SSM_CONV_STATE_LAYOUT=DS\nvllm serve m")
    assert line.conv_layout is None and "not exported" in line.notes[0]


def test_report_fits_80_columns_and_corrected_lines_paste_back():
    p, d = lines("Qwen/Qwen3.5-0.8B", "", "-tp 4")
    result = run_cli("preflight", "--prefill", p, "--decode", d, env={"COLUMNS": "80"})
    assert result.code == 1
    out = result.stdout.splitlines()
    assert out[0].startswith("REFUSED")
    assert max(map(len, out)) <= 80
    assert "…" not in result.stdout
    report = preflight(parse_serve(p), parse_serve(d), load_model)
    shown = quote_lines(report.fix.decode, 76)
    assert all(len(x) <= 76 for x in shown)
    pasted = " ".join(x.rstrip("\\").strip() for x in shown)
    assert shlex.split(pasted) == shlex.split(report.fix.decode.command())


def test_schema_lists_preflight():
    result = run_cli("schema", "preflight")
    assert result.code == 0 and json.loads(result.stdout)["title"] == "mambaxfer.preflight/v1"


def test_hf_overrides_changing_kv_heads_on_one_side_is_a_hash_mismatch():
    p, d = lines("nvidia/Nemotron-H-8B-Base-8K", "", "-tp 2 --hf-overrides '{\"num_key_value_heads\": 4}'")
    code, doc = run_json(p, d)
    assert code == 1
    heads = next(f for f in doc["compared"] if f["field"] == "KV heads")
    assert (heads["prefill"], heads["decode"], heads["agree"]) == (8, 4, False)
    assert doc["vllm"]["refusals"][0]["code"] == "compat-hash"
    assert "KV heads 4 vs 8" in doc["vllm"]["refusals"][0]["message"]
    assert doc["byte_check"] is None and "num_kv_heads" in doc["byte_check_skipped"]
    assert [(c["flag"], c["new"]) for c in doc["fix"]["changes"]] == [("--hf-overrides", None)]
    check_fix_works(doc)


@pytest.mark.parametrize("prefill, decode, code", [
    ("qwen35-prefill.sh", "qwen35-decode.sh", 1),
    ("nemotron-prefill.sh", "nemotron-decode.sh", 0),
])
def test_the_readme_example_scripts(prefill, decode, code):
    """The README's scripts (comments with apostrophes, exports, continuations) as shipped."""
    from pathlib import Path

    examples = Path(__file__).resolve().parent.parent / "examples" / "preflight"
    result = run_cli("preflight", "--prefill-file", str(examples / prefill), "--decode-file", str(examples / decode))
    assert result.code == code, result.stdout + result.stderr
    if code:
        assert "--block-size 144" in result.stdout
        assert "VLLM_SSM_CONV_STATE_LAYOUT=DS CUDA_VISIBLE_DEVICES=0 vllm serve" in result.stdout


PUSH_P = """--kv-transfer-config '{"kv_connector":"NixlPushConnector","kv_role":"kv_producer"}'"""
PUSH_D = """--kv-transfer-config '{"kv_connector":"NixlPushConnector","kv_role":"kv_consumer"}'"""


def test_push_mode_checks_the_handshake_from_p():
    """NixlPushConnector: P is the local side of the handshake, so in vLLM 0.33 P's kernel block
    must be a multiple of D's: P --block-size 1152, D 576 (equal TP) passes in push mode, where pull
    mode refuses it; vLLM 0.34 refuses any difference (NixlPushConnectorWorker's identical blocks)."""
    p = f"{DS} vllm serve Qwen/Qwen3.5-0.8B --block-size 1152 {PUSH_P}"
    d = f"{DS} vllm serve Qwen/Qwen3.5-0.8B --block-size 576 {PUSH_D}"
    code, doc = run_json(p, d, "--vllm-version", "0.33")
    assert (doc["engines"]["prefill"]["geometry"]["block_size"], doc["engines"]["decode"]["geometry"]["block_size"]) \
        == (1152, 576)
    assert code == 0 and doc["vllm"]["accepts"], doc["headline"]
    assert any("push mode" in w for w in doc["warnings"])
    code, doc = run_json(p.replace(PUSH_P, P_KV), d.replace(PUSH_D, D_KV), "--vllm-version", "0.33")
    assert code == 1 and doc["vllm"]["refusals"][0]["code"] == "block-size"
    code, doc = run_json(p, d, "--vllm-version", "0.34")
    assert code == 1 and [r["code"] for r in doc["vllm"]["refusals"]] == ["push-block-sizes"]


def test_qwen35_push_p_tp1_d_tp8_default_flags_is_refused_by_034():
    """Default flags: P 576 tokens, D 192. vLLM 0.34 refuses on P's handshake right after the hash;
    vLLM 0.33 meets D's two head sources across different kernel blocks (head-sharded)."""
    p = f"{DS} vllm serve Qwen/Qwen3.5-0.8B {PUSH_P}"
    d = f"{DS} vllm serve Qwen/Qwen3.5-0.8B -tp 8 {PUSH_D}"
    code, doc = run_json(p, d, "--vllm-version", "0.34")
    assert code == 1 and doc["verdict"] == "refused"
    assert doc["vllm"]["refusals"][0]["message"] == (
        "NixlPushConnector requires identical P/D block sizes. Kernel block size and kernel blocks per logical "
        "block: local (576, 1), remote engine D (192, 1).")
    assert doc["headline"].startswith("REFUSED: vLLM 0.34 would not run this pairing (push-block-sizes")
    assert doc["fix"] is not None and "--block-size" in {c["flag"] for c in doc["fix"]["changes"]}
    check_fix_works(doc)
    code, doc = run_json(p, d, "--vllm-version", "0.33")
    assert code == 1 and [r["code"] for r in doc["vllm"]["refusals"]] == ["head-sharded-block-size"]


from hypothesis import given, settings, strategies as st  # noqa: E402

_WORDS = st.sampled_from(["vllm", "serve", "qwen3.5-0.8b", "-tp", "4", "--block-size", "--block_size=16", "'",
                          '"', "\\\n", "\n", "export", "X=1", "VLLM_SSM_CONV_STATE_LAYOUT=DS", "--kv-transfer-config",
                          '{"kv_role": 1}', "--no-enable-prefix-caching=1", "--speculative-config.x", "#", ";",
                          "--dtype", "half", "-", "--", "--hf-overrides", "[1]", "python", "-m",
                          "vllm.entrypoints.openai.api_server", "--model", "--x.y", "=", "$V", "&&"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_WORDS, st.text(max_size=8)), max_size=14))
def test_any_text_is_a_serve_line_or_one_user_error(words):
    text = " ".join(words)
    try:
        line = parse_serve(text)
    except UserError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400
        return
    assert line.words[:2] in (("vllm", "serve"),) or line.words[1] == "-m"


def test_num_spec_on_one_side_changes_conv_rows_and_the_fix_copies_it():
    """MTP on P only: the hash compares the speculative method, and D's conv rows (conv_kernel - 1 +
    num_spec) differ from P's."""
    p, d = lines("Qwen/Qwen3.5-0.8B", "--speculative-config.method mtp --speculative-config.num_speculative_tokens 2",
                 "-tp 2")
    code, doc = run_json(p, d)
    assert code == 1
    rows = next(f for f in doc["not_compared"] if f["field"] == "num_spec / conv rows")
    assert (rows["prefill"], rows["decode"]) == ("2 / 5", "0 / 3")
    assert [(c["flag"], c["new"]) for c in doc["fix"]["changes"]] == [
        ("--speculative-config", '{"method":"mtp","num_speculative_tokens":2}')]
    check_fix_works(doc)


def test_ssm_dtype_mismatch_at_default_block_sizes_shows_in_the_geometry():
    """Without a pinned --block-size the smaller bfloat16 state gives P smaller blocks (vLLM 0.33:
    528 vs 1040 tokens): vLLM refuses on block sizes, and the one-flag fix is the dtype, not two
    block sizes."""
    p, d = lines("nvidia/Nemotron-H-8B-Base-8K", "--mamba-ssm-cache-dtype bfloat16", "-tp 2")
    code, doc = run_json(p, d, "--vllm-version", "0.33")
    assert code == 1 and doc["vllm"]["refusals"][0]["code"] == "block-size"
    assert (doc["engines"]["prefill"]["geometry"]["block_size"], doc["engines"]["decode"]["geometry"]["block_size"]) \
        == (528, 1040)
    assert [(c["side"], c["flag"], c["new"]) for c in doc["fix"]["changes"]] == [
        ("decode", "--mamba-ssm-cache-dtype", "bfloat16")]
    check_fix_works(doc)


def test_the_model_line_says_preset_only_for_a_preset(tmp_path):
    model = tmp_path / "mymodel"
    model.mkdir()
    (model / "config.json").write_text((ROOT / "examples/models/granite-like/config.json").read_text())
    result = run_cli("preflight", "--prefill", f"vllm serve {model} -tp 1", "--decode", f"vllm serve {model} -tp 2",
                     env={"COLUMNS": "400"})
    assert f"P model: {model} ({model}/config.json)" in result.stdout, result.stdout
    assert "preset" not in result.stdout.split("Engines")[0]
    preset = run_cli("preflight", "--prefill", "vllm serve Qwen/Qwen3.5-0.8B",
                     "--decode", "vllm serve Qwen/Qwen3.5-0.8B")
    assert "P model: Qwen/Qwen3.5-0.8B (qwen3.5-0.8b preset)" in preset.stdout


def test_an_ssm_dtype_mismatch_is_fixed_by_the_dtype_alone_in_every_section():
    p, d = lines("nvidia/Nemotron-H-8B-Base-8K", "--mamba-ssm-cache-dtype bfloat16", "-tp 2")
    result = run_cli("preflight", "--prefill", p, "--decode", d, env={"COLUMNS": "200"})
    assert result.code == 1
    fixes = [line.strip() for line in result.stdout.splitlines() if "fix" in line.lower() or "--block-size" in line]
    assert not [line for line in fixes if line.startswith("fix: --block-size")], fixes
    assert "D: --mamba-ssm-cache-dtype bfloat16" in result.stdout
# --- releases and GPUs --------------------------------------------------------------------------------

MTP = "--speculative-config '{{\"method\":\"{method}\",\"num_speculative_tokens\":{n}}}'"


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_mtp_1_on_p_and_2_on_d_is_accepted_and_corrupt(version):
    """vLLM hashes the speculative method (qwen3_5_mtp is rewritten to mtp, config/speculative.py) and
    draft, never num_speculative_tokens: the hash agrees, and D's conv rows (4 - 1 + 2 = 5) are not P's
    (4), so D reads P's conv state with its own offsets."""
    p, d = lines("Qwen/Qwen3.5-0.8B", MTP.format(method="qwen3_5_mtp", n=1), MTP.format(method="mtp", n=2))
    code, doc = run_json(p, d, "--vllm-version", version)
    assert code == 1 and doc["verdict"] == "corrupt" and doc["vllm"]["accepts"]
    spec = next(f for f in doc["compared"] if f["field"].startswith("speculative"))
    assert spec["agree"] and spec["prefill"].startswith("method=mtp, model=Qwen/Qwen3.5-0.8B")
    assert "num_spec / conv rows: P 1 / 4, D 2 / 5" in doc["unchecked_mismatches"]
    assert doc["byte_check"]["verdict"] == "fail" and doc["byte_check"]["wrong_bytes"] > 0
    assert doc["headline"].startswith("CORRUPT: P and D differ in num_spec / conv rows (P 1 / 4, D 2 / 5)")
    assert f"vLLM {version} accepts the pairing" in doc["headline"]
    check_fix_works(doc)


def test_mtp_layers_are_in_the_byte_check_and_vllms_refusal_is_its_words():
    """Qwen3.5's MTP layer joins the target's KV-cache groups (docs/reference.md, section 4): the byte
    check moves its pages too, and no line warns; vLLM refuses MTP without a token count."""
    def moved(spec: str) -> tuple[int, dict]:
        flag = f"--speculative-config '{spec}'"
        code, doc = run_json(*lines("Qwen/Qwen3.5-0.8B", flag, f"--tensor-parallel-size 2 {flag}"))
        assert code == 0 and doc["verdict"] == "works" and doc["byte_check"]["wrong_bytes"] == 0
        return doc["byte_check"]["bytes_moved"], doc

    with_mtp, doc = moved('{"method":"mtp","num_speculative_tokens":1}')
    assert not [w for w in doc["warnings"] if "is_draft layers" in w] and not doc["plan_warnings"]
    without, _ = moved('{"model":"some/eagle3-head","method":"eagle3","num_speculative_tokens":1}')
    assert with_mtp > without       # the same conv rows; the draft layer's attention pages beside
    flag = """--speculative-config '{"method":"mtp"}'"""
    code, doc = run_json(*lines("Qwen/Qwen3.5-0.8B", flag, flag))
    refusal = doc["vllm"]["refusals"][0]
    assert code == 1 and refusal["code"] == "speculative-config"
    assert "num_speculative_tokens must be provided with speculative model" in refusal["message"]


@pytest.mark.parametrize("spec, method", [
    ('{"model":"some/eagle3-head","method":"eagle3","num_speculative_tokens":2}', "eagle3"),
    ('{"method":"draft_model","model":"some/draft","num_speculative_tokens":1}', "draft_model"),
    ('{"method":"ngram","num_speculative_tokens":2,"prompt_lookup_max":3}', None),
    ('{"method":"suffix","num_speculative_tokens":2}', None),
    ('{"model":"[ngram]","num_speculative_tokens":2}', None),
])
def test_a_drafting_method_is_named_and_a_draftless_one_is_not(spec, method):
    """A method that drafts with a model adds draft layers to vLLM's KV-cache groups, which mambaxfer
    does not plan: each line says so, and so does the plan; n-gram and suffix drafting add none."""
    flag = f"--speculative-config '{spec}'"
    code, doc = run_json(*lines("Qwen/Qwen3.5-0.8B", flag, f"--tensor-parallel-size 2 {flag}"))
    assert code == 0 and doc["verdict"] == "works"
    drafted = [w for w in doc["warnings"] if "is_draft layers" in w]
    plan_codes = [w["code"] for w in doc["plan_warnings"]]
    if method is None:
        assert not drafted and "draft-layers" not in plan_codes
    else:
        assert [w.split(":")[0] for w in drafted] == ["P", "D"]
        assert all(w[3:].startswith(f"--speculative-config method {method}: ") for w in drafted), drafted
        assert plan_codes.count("draft-layers") == 1


def test_033_hashes_parallel_drafting_and_034_does_not():
    p, d = lines("Qwen/Qwen3.5-0.8B", MTP.format(method="mtp", n=1).replace("}'", ",\"parallel_drafting\":true}'"),
                 MTP.format(method="mtp", n=1))
    code, doc = run_json(p, d, "--vllm-version", "0.33")
    assert code == 1 and doc["vllm"]["refusals"][0]["code"] == "compat-hash"
    assert "parallel_drafting=True" in doc["vllm"]["refusals"][0]["message"]
    code, doc = run_json(p, d, "--vllm-version", "0.34")
    assert code == 0 and doc["verdict"] == "works", doc["headline"]


def test_engines_of_two_releases_refuse_each_other():
    p, d = lines("Qwen/Qwen3.5-0.8B", "--block-size 144", "-tp 4 --block-size 144")
    code, doc = run_json(p, d, "--p-vllm-version", "0.33", "--d-vllm-version", "0.34")
    assert code == 1 and doc["vllm_versions"] == {"prefill": "0.33", "decode": "0.34"}
    first = doc["vllm"]["refusals"][0]
    assert first["code"] == "compat-hash" and first["message"].startswith("NIXL compatibility hash mismatch.")
    assert "vLLM version 0.34.0 vs 0.33.0" in first["message"]
    assert doc["headline"].startswith("REFUSED: vLLM 0.33 (P) / 0.34 (D) would not run this pairing")
    # With the hash not enforced, 0.34's D still finds no layers in 0.33's region metadata.
    no_hash = d.replace('"kv_role":"kv_consumer"', '"kv_role":"kv_consumer","kv_connector_extra_config":'
                                                    '{"enforce_handshake_compat":false}')
    code, doc = run_json(p, no_hash, "--p-vllm-version", "0.33", "--d-vllm-version", "0.34")
    assert code == 1 and [r["code"] for r in doc["vllm"]["refusals"]] == ["region-layers"]
    assert doc["vllm"]["refusals"][0]["message"] == "Engine P did not advertise the layers of its KV regions."
    assert any("skips its compatibility hash" in w and "vLLM version" in w for w in doc["warnings"]), doc["warnings"]


@pytest.mark.parametrize("flag", ["--gdn-prefill-backend triton",
                                  "--additional-config '{\"gdn_prefill_backend\": \"triton\"}'"])
def test_the_gdn_prefill_backend_of_a_line_sets_its_alignment(flag):
    # Triton's GDN prefill exports no checkpoints: vLLM 0.33 at TP 1 gives 16·ceil(33.1) = 544, not 576.
    p, d = lines("Qwen/Qwen3.5-0.8B", flag, "")
    code, doc = run_json(p, d, "--vllm-version", "0.33")
    assert doc["engines"]["prefill"]["geometry"]["block_size"] == 544
    assert doc["engines"]["prefill"]["geometry"]["gdn_prefill_backend"] == "triton"
    assert doc["engines"]["decode"]["geometry"]["block_size"] == 576
    assert code == 1 and doc["vllm"]["refusals"][0]["code"] == "block-size"


def test_the_gpu_decides_the_gdn_backend():
    p, d = lines("Qwen/Qwen3.5-0.8B", "", "-tp 4")
    code, doc = run_json(p, d, "--vllm-version", "0.33", "--gpu", "A100")
    assert doc["gpu"] == {"prefill": "A100", "decode": "A100"}
    sizes = [doc["engines"][s]["geometry"]["block_size"] for s in ("prefill", "decode")]
    assert sizes == [544, 272] and doc["engines"]["prefill"]["geometry"]["gdn_prefill_backend"] == "triton"


def test_flags_of_a_release_are_known_to_it_and_a_fatal_variable_stops_034():
    p, d = lines("Qwen/Qwen3.5-0.8B", "--max-num-inflight-kv-loads 4 --enable-extensible-kv-cache", "",
                 d_env=f"{DS} VLLM_USE_V2_MODEL_RUNNER=0")
    code, doc = run_json(p, d, "--vllm-version", "0.34")
    assert not any("unknown to vLLM 0.34" in w for w in doc["warnings"])
    assert doc["vllm"]["refusals"][0] == {
        "code": "environment", "message": "D: vLLM 0.34 refuses to start: VLLM_USE_V2_MODEL_RUNNER=0 is no longer "
                                          "supported: Model Runner V1 has been removed. Unset this variable."}
    code, doc = run_json(p, d, "--vllm-version", "0.33")
    assert any(w.startswith("P: --max-num-inflight-kv-loads is known to vLLM 0.34 only, and this engine runs "
                            "vLLM 0.33") for w in doc["warnings"]), doc["warnings"]
    assert not any(r["code"] == "environment" for r in doc["vllm"]["refusals"])


def test_startup_refusals_come_first_and_exit_1(tmp_path):
    # vLLM's parser, then ModelConfig.verify_with_parallel_config: both before the connector.
    ex = Path(__file__).parent.parent / "examples" / "preflight"
    prefill, decode = (ex / "qwen35-prefill.sh").read_text(), (ex / "qwen35-decode.sh").read_text()
    bad = tmp_path / "bad.sh"
    bad.write_text(decode.replace("--tensor-parallel-size", "--tensor-paralel-size"))
    result = run_cli("preflight", "--prefill-file", str(ex / "qwen35-prefill.sh"), "--decode-file", str(bad))
    assert result.code == 1
    assert result.stdout.startswith("REFUSED: vLLM 0.34 does not start the decode engine: vllm serve exits "
                                    "with unrecognized arguments: --tensor-paralel-size")
    assert "did you mean --tensor-parallel-size?" in result.stdout
    abbreviated = tmp_path / "abbrev.sh"        # argparse's abbreviations are accepted, as vLLM's are
    abbreviated.write_text(decode.replace("--tensor-parallel-size", "--tensor-parallel"))
    as_written = run_cli("preflight", "--prefill-file", str(ex / "qwen35-prefill.sh"),
                         "--decode-file", str(ex / "qwen35-decode.sh"))
    short = run_cli("preflight", "--prefill-file", str(ex / "qwen35-prefill.sh"), "--decode-file", str(abbreviated))
    assert short.stdout.splitlines()[0] == as_written.stdout.splitlines()[0]
    assert "unrecognized" not in short.stdout
    granite = "ibm-granite/granite-4.0-h-tiny"
    p, d = tmp_path / "p.sh", tmp_path / "d.sh"
    p.write_text(prefill.replace("Qwen/Qwen3.5-0.8B", granite))
    d.write_text(decode.replace("Qwen/Qwen3.5-0.8B", granite).replace("-size 4", "-size 8"))
    result = run_cli("preflight", "--prefill-file", str(p), "--decode-file", str(d))
    assert result.code == 1
    assert result.stdout.startswith("REFUSED: vLLM 0.34 does not start the decode engine: 12 attention heads "
                                    "do not divide by TP 8")
    assert "verify_with_parallel_config" in result.stdout.split("\n\n")[0]


@pytest.mark.parametrize("release", ["0.33", "0.34"])
def test_use_replayssm_beside_a_connector_stops_the_engine_and_the_fix_removes_it(release):
    # VllmConfig.validate_mamba_cached_kernel: any KV connector refuses ReplaySSM (its rings are not sent).
    # vLLM 0.33 runs triton ReplaySSM on Model Runner V1 only, and starts V2 unless told otherwise.
    v1 = "VLLM_USE_V2_MODEL_RUNNER=0 " if release == "0.33" else ""
    p, d = lines("nvidia/Nemotron-H-8B-Base-8K", "--use-replayssm", "-tp 2", p_env=v1 + DS)
    code, doc = run_json(p, d, "--vllm-version", release)
    assert code == 1
    assert doc["vllm"]["refusals"][0] == {
        "code": "replayssm", "message": f"vLLM {release} does not start the prefill engine: --use-replayssm is "
                                        f"incompatible with KV connectors (P/D disaggregation, KV cache offload) "
                                        f"(VllmConfig.validate_mamba_cached_kernel)"}
    if release == "0.33":
        p, d = lines("nvidia/Nemotron-H-8B-Base-8K", "--use-replayssm", "-tp 2")
        code, doc = run_json(p, d, "--vllm-version", release)
        assert code == 1 and doc["vllm"]["refusals"][0]["message"] == (
            "vLLM 0.33 does not start the prefill engine: Triton ReplaySSM requires Model Runner V1; use "
            "--mamba-backend flashinfer or Model Runner V1 (VllmConfig.validate_mamba_cached_kernel)")
    fix = doc["fix"]
    assert [c["flag"] for c in fix["changes"]] == ["--use-replayssm"] and fix["changes"][0]["new"] is None
    assert "--use-replayssm" not in fix["prefill"]
    # Negated on the line: vLLM starts, and so does the transfer.
    p, d = lines("nvidia/Nemotron-H-8B-Base-8K", "--use-replayssm --no-use-replayssm", "-tp 2")
    code, doc = run_json(p, d, "--vllm-version", release)
    assert not any(r["code"] == "replayssm" for r in doc["vllm"]["refusals"])
    # Only Nemotron-H's class supports ReplaySSM at all.
    p, d = lines("Qwen/Qwen3.5-0.8B", "--use-replayssm")
    code, doc = run_json(p, d, "--vllm-version", release)
    assert doc["vllm"]["refusals"][0]["message"].startswith(f"vLLM {release} does not start the prefill engine: "
                                                            f"--use-replayssm is not supported for architecture")


@pytest.mark.parametrize("release", ["0.33", "0.34"])
def test_recoverssm_beside_a_connector_needs_the_triton_mamba_backend(release):
    """Kimi-Linear with speculative tokens and --use-replayssm runs RecoverSSM, which a connector
    moves; on --mamba-backend flashinfer vLLM does not start (validate_mamba_cached_kernel)."""
    spec = """--speculative-config '{"method":"eagle3","model":"org/kimi-eagle3","num_speculative_tokens":2}'"""
    flags = f"--use-replayssm {spec} --no-enable-prefix-caching"
    p, d = lines("moonshotai/Kimi-Linear-48B-A3B-Instruct", flags, flags)
    code, doc = run_json(p, d, "--vllm-version", release)
    assert code == 0 and doc["verdict"] == "works", doc["headline"]
    p, d = lines("moonshotai/Kimi-Linear-48B-A3B-Instruct", flags + " --mamba-backend flashinfer", flags)
    code, doc = run_json(p, d, "--vllm-version", release)
    assert code == 1 and doc["vllm"]["refusals"][0] == {
        "code": "replayssm", "message": f"vLLM {release} does not start the prefill engine: RecoverSSM requires "
                                        f"--mamba-backend triton (VllmConfig.validate_mamba_cached_kernel)"}
    # The fix keeps RecoverSSM and runs it on its backend.
    assert [(c["flag"], c["new"]) for c in doc["fix"]["changes"]] == [("--mamba-backend", "triton")]
    assert "--use-replayssm" in doc["fix"]["prefill"] and "--mamba-backend triton" in doc["fix"]["prefill"]
    check_fix_works(doc)


def test_033_recoverssm_with_prefix_caching_needs_model_runner_v2_which_suffix_decoding_turns_off():
    """vLLM 0.33 runs Model Runner V1 for suffix decoding (_get_v2_model_runner_unsupported_features),
    and RecoverSSM with prefix caching needs V2; an explicit VLLM_USE_V2_MODEL_RUNNER=1 wins."""
    suffix = """--use-replayssm --speculative-config '{"method":"suffix","num_speculative_tokens":2}'"""
    p, d = lines("moonshotai/Kimi-Linear-48B-A3B-Instruct", suffix, suffix)
    code, doc = run_json(p, d, "--vllm-version", "0.33")
    assert code == 1 and doc["vllm"]["refusals"][0]["message"] == (
        "vLLM 0.33 does not start the prefill engine: RecoverSSM with prefix caching requires "
        "VLLM_USE_V2_MODEL_RUNNER=1 (VllmConfig.validate_mamba_cached_kernel)")
    v2 = "VLLM_USE_V2_MODEL_RUNNER=1 " + DS
    p, d = lines("moonshotai/Kimi-Linear-48B-A3B-Instruct", suffix, suffix, p_env=v2)
    code, doc = run_json(p, d, "--vllm-version", "0.33")
    assert doc["vllm"]["refusals"][0]["message"].startswith("vLLM 0.33 does not start the decode engine: RecoverSSM")
    p, d = lines("moonshotai/Kimi-Linear-48B-A3B-Instruct", suffix, suffix, p_env=v2, d_env=v2)
    code, doc = run_json(p, d, "--vllm-version", "0.33")
    assert not any(r["code"] == "replayssm" for r in doc["vllm"]["refusals"]), doc["vllm"]["refusals"]


def test_stochastic_rounding_on_triton_needs_a_data_center_blackwell():
    """MambaConfig: the triton kernels' stochastic rounding (cvt.rs) exists on compute capability
    10.x only; on an H100 vLLM does not start, and the fix drops the flag."""
    p, d = lines("nvidia/Nemotron-H-8B-Base-8K", "--enable-mamba-cache-stochastic-rounding")
    code, doc = run_json(p, d, "--gpu", "H100")
    assert code == 1 and doc["vllm"]["refusals"][0]["code"] == "mamba-config"
    assert "requires compute capability 10.0 (data center Blackwell)" in doc["vllm"]["refusals"][0]["message"]
    assert "--enable-mamba-cache-stochastic-rounding" not in doc["fix"]["prefill"]
    check_fix_works(doc)
    code, doc = run_json(p, d, "--gpu", "B200")
    assert not any(r["code"] == "mamba-config" for r in doc["vllm"]["refusals"])
    p, d = lines("nvidia/Nemotron-H-8B-Base-8K", "--enable-mamba-cache-stochastic-rounding --mamba-backend flashinfer")
    code, doc = run_json(p, d, "--gpu", "H100")
    assert not any(r["code"] == "mamba-config" for r in doc["vllm"]["refusals"])


def test_an_unknown_mamba_backend_is_one_line():
    p, d = lines("nvidia/Nemotron-H-8B-Base-8K", "--mamba-backend cuda")
    result = run_cli("preflight", "--prefill", p, "--decode", d)
    assert_user_error(result, "--mamba-backend: vLLM does not start: Unknown Mamba SSU backend: 'CUDA'. Valid "
                              "options are: TRITON, FLASHINFER, CPU")


QWEN4EXP = "Qwen/Qwen3.8-Flash-Next"


def test_qwen4exp_across_tp_sizes_needs_blhnc_on_both_and_the_fix_sets_it():
    # QSA's indexer allows BLNHC and BLHNC only: the engine runs BLNHC (the NIXL connector's LBHNC
    # is dropped), which cannot split P's heads for D (P TP 2 = its 2 KV heads).
    p, d = lines(QWEN4EXP, "-tp 2", "-tp 4")
    code, doc = run_json(p, d)
    assert code == 1
    assert doc["engines"]["prefill"]["kv_cache_layout"] == "BLNHC"
    said = [r["code"] for r in doc["vllm"]["refusals"]]
    assert said == ["block-size", "kv-cache-layout-heads", "ple-geometry"]
    layout = [c for c in doc["fix"]["changes"] if c["flag"] == "VLLM_KV_CACHE_LAYOUT"]
    assert sorted(c["side"] for c in layout) == ["decode", "prefill"] and {c["new"] for c in layout} == {"BLHNC"}
    check_fix_works(doc)


def test_qwen4exp_refuses_the_connectors_own_layout_at_start_up():
    p, d = lines(QWEN4EXP, "-tp 2", "-tp 2", p_env=f"{DS} VLLM_KV_CACHE_LAYOUT=LBHNC")
    code, doc = run_json(p, d)
    assert code == 1
    messages_ = [r["message"] for r in doc["vllm"]["refusals"]]
    assert any("VLLM_KV_CACHE_LAYOUT=LBHNC does not satisfy every supported set; valid layouts: "
               "['BLNHC', 'BLHNC']" in m for m in messages_), messages_


# --- the fix does what a person would: drop, respell, the nearest TP size -------------------------

def fix_changes(doc) -> list[tuple]:
    return [(c["side"], c["flag"], c["old"], c["new"]) for c in doc["fix"]["changes"]]


def test_another_engines_flag_is_dropped_with_its_value_and_only_that_line_is_printed(tmp_path):
    # SGLang's --disaggregation-mode in a vllm serve line: vLLM's parser stops; nothing of vLLM's is meant.
    p, d = lines("Qwen/Qwen3.5-0.8B", "--disaggregation-mode prefill", "")
    code, doc = run_json(p, d)
    assert code == 1 and doc["vllm"]["refusals"][0]["code"] == "unrecognized-arguments"
    assert "did you mean" not in doc["headline"]
    assert fix_changes(doc) == [("prefill", "--disaggregation-mode", "prefill", None)]
    assert shlex.split(doc["fix"]["prefill"]) == shlex.split(p.replace(" --disaggregation-mode prefill", ""))
    assert doc["fix"]["changed"] == ["prefill"] and shlex.split(doc["fix"]["decode"]) == shlex.split(d)
    check_fix_works(doc)
    result = run_cli("preflight", "--prefill", p, "--decode", d, env={"COLUMNS": "80"})
    fix = result.stdout.split("\nFix\n", 1)[1].splitlines()
    assert fix[0] == "  P: remove --disaggregation-mode prefill  (no vLLM release takes it)"
    assert fix[1] == "  corrected command line (verified: works):" and fix[2] == "  # prefill"
    assert "  # decode" not in fix and max(map(len, result.stdout.splitlines())) <= 80
    junit = tmp_path / "preflight.xml"
    run_cli("preflight", "--prefill", p, "--decode", d, "--junit", str(junit))
    failure = junit.read_text().split("fix:", 1)[1]
    assert "--port 8100" in failure and "--port 8200" not in failure     # the changed line only


@pytest.mark.parametrize("written, spelled", [("--tp 2", "-tp 2"), ("--tp=2", "-tp=2"), ("--tp-size 2", "-tp 2"),
                                              ("--tensor_paralel_size 2", "--tensor-parallel-size 2")])
def test_a_flag_vllm_names_is_respelled(written, spelled):
    p, d = lines("Qwen/Qwen3.5-0.8B", "", written)
    code, doc = run_json(p, d)
    assert code == 1 and doc["vllm"]["refusals"][0]["code"] == "unrecognized-arguments"
    flag = written.split()[0].split("=")[0].replace("_", "-")
    assert fix_changes(doc) == [("decode", flag, flag, spelled.split()[0].split("=")[0])]
    assert spelled in doc["fix"]["decode"] and doc["fix"]["changed"] == ["decode"]
    assert doc["fix"]["verdict_after"] == "works"
    check_fix_works(doc)


@pytest.mark.parametrize("tp, moved, where", [("3", "2", "below"), ("5", "4", "below"), ("7", "8", "above")])
def test_a_tp_size_vllm_does_not_start_moves_to_the_nearest_that_works(tp, moved, where):
    # Qwen3.5-0.8B's 8 attention heads: TP 1, 2, 4, 8 start (inspect's list).
    p, d = lines("Qwen/Qwen3.5-0.8B", "", f"-tp {tp}")
    code, doc = run_json(p, d)
    assert code == 1 and doc["vllm"]["refusals"][0]["code"] == "parallel-config"
    first, *then = fix_changes(doc)        # P TP 1 → D TP 4 or 8 also needs the blocks aligned (see above)
    assert first == ("decode", "--tensor-parallel-size", tp, moved)
    assert {c[1] for c in then} <= {"--block-size"} and (then == []) == (moved == "2")
    why = doc["fix"]["changes"][0]["why"]
    assert why.startswith(f"8 attention heads do not divide by TP {tp}; {moved} is the nearest size {where}")
    assert ("4, as near, takes more GPUs" in why) == (tp == "3")
    check_fix_works(doc)


def test_a_respelled_tp_flag_whose_size_does_not_start_is_one_change():
    p, d = lines("Qwen/Qwen3.5-0.8B", "", "--tp 3")
    code, doc = run_json(p, d)
    assert fix_changes(doc) == [("decode", "--tensor-parallel-size", "3", "2")]
    assert doc["fix"]["changes"][0]["why"].startswith("in place of --tp, which vllm serve does not take; 8 attention "
                                                      "heads do not divide by TP 3; 2 is the nearest size below")
    assert "--tp" not in doc["fix"]["decode"].replace("--tensor-parallel-size", "")
    check_fix_works(doc)


def test_a_flag_of_another_release_is_dropped():
    p, d = lines("Qwen/Qwen3.5-0.8B", "--max-num-inflight-kv-loads 4", "")
    code, doc = run_json(p, d, "--vllm-version", "0.33")
    assert code == 1 and doc["vllm"]["refusals"][0]["code"] == "unrecognized-arguments"
    assert doc["fix"]["changes"] == [{"side": "prefill", "flag": "--max-num-inflight-kv-loads", "old": "4",
                                      "new": None, "why": "vLLM 0.33 does not take it (0.34 only)"}]
    check_fix_works(doc)


def test_the_fix_of_sglangs_role_flags_fits_80_columns_and_cuts_no_value():
    # SGLang's way of naming the roles, in vllm serve lines: dropped, and vLLM's connector and role added.
    p = "vllm serve Qwen/Qwen3.5-0.8B --disaggregation-mode prefill"
    d = "vllm serve Qwen/Qwen3.5-0.8B --disaggregation-mode decode --tp-size 2"
    code, doc = run_json(p, d)
    assert code == 1 and doc["fix"]["verdict_after"] == "works" and doc["fix"]["changed"] == ["prefill", "decode"]
    check_fix_works(doc)
    result = run_cli("preflight", "--prefill", p, "--decode", d, env={"COLUMNS": "80"})
    fix = result.stdout.split("\nFix\n", 1)[1].split("\nwarning:", 1)[0].splitlines()
    assert max(map(len, fix)) <= 80
    assert "  P: --kv-transfer-config as the corrected line has it  (the engine's NIXL" in fix
    for side in ("prefill", "decode"):       # each JSON value whole on one line
        value = json.dumps(json.loads(shlex.split(doc["fix"][side])[-1]), separators=(",", ":"))
        assert sum(f"'{value}'" in line for line in fix) == 1, (value, fix)


def test_nemotron_h_mtp_layer_is_in_the_byte_check(tmp_path):
    """Nemotron-3-Super served with MTP: its "*E" drafter's attention layer joins the target's
    groups, so the byte check moves one attention layer's pages more than the n-gram lines do."""
    fixture = Path(__file__).parent / "fixtures" / "hf-configs"
    (tmp_path / "config.json").write_text(
        (fixture / "nvidia__NVIDIA-Nemotron-3-Super-120B-A12B-BF16.partial.json").read_text())

    def moved(spec: str) -> tuple[int, dict]:
        flag = f"--speculative-config '{spec}'"
        code, doc = run_json(*lines(str(tmp_path), flag, f"--tensor-parallel-size 2 {flag}"))
        assert code == 0 and doc["verdict"] == "works" and doc["byte_check"]["wrong_bytes"] == 0, doc["headline"]
        return doc["byte_check"]["bytes_moved"], doc

    with_mtp, doc = moved('{"method":"mtp","num_speculative_tokens":1}')
    assert not doc["plan_warnings"]
    without, _ = moved('{"method":"ngram","num_speculative_tokens":1}')
    assert with_mtp > without


def test_a_model_files_own_overrides_hold_beside_hf_overrides(tmp_path):
    """A serve line's --hf-overrides change the config's keys, not what the model file says of
    itself: its ssm_dtype is still said to come from the file (it was said to be --ssm-dtype)."""
    path = tmp_path / "toy.yaml"
    path.write_text((ROOT / "examples/models/toy-mamba2.yaml").read_text() + "ssm_dtype: float32\n")
    plain, over = load_model(str(path)), load_model(str(path), hf_overrides={"num_hidden_layers": 2})
    assert (len(plain.layers), len(over.layers)) == (4, 2)
    assert over.ssm_dtype == plain.ssm_dtype == "float32"
    assert over.origin["ssm_dtype"] == plain.origin["ssm_dtype"] == "toy.yaml: ssm_dtype"
