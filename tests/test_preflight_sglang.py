"""mambaxfer preflight for SGLang: two real SGLang launch lines in (``python -m sglang.launch_server``
or ``sglang serve``), SGLang 0.5.23's verdict, the fields and the corrected lines out (exit 0
works, 1 refused, failing or corrupt, 2 usage)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import jsonschema
import pytest

from cli_run import assert_user_error, run_cli
from mambaxfer_cli.engines.sglang.verdict import verdict
from mambaxfer_cli.engines.sglang.launch_args import flag_table, launches, parse_launch
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.sglang.preflight import preflight
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.schema import document_schema

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "preflight"
LAUNCH = "python -m sglang.launch_server"
QWEN = "Qwen/Qwen3-Next-80B-A3B-Instruct"


def lines(model: str, p_flags: str = "", d_flags: str = "", backend: str = "nixl") -> tuple[str, str]:
    both = f"--disaggregation-transfer-backend {backend}"
    return (f"{LAUNCH} --model-path {model} --disaggregation-mode prefill {both} {p_flags}".strip(),
            f"{LAUNCH} --model-path {model} --disaggregation-mode decode {both} {d_flags}".strip())


def run_json(p: str, d: str, *extra: str):
    result = run_cli("preflight", "--prefill", p, "--decode", d, "--format", "json", *extra)
    assert "Traceback" not in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc, document_schema("preflight"))
    assert doc["exit_code"] == result.code and doc["engine"] == "sglang"
    return result.code, doc


def check_fix_works(doc) -> None:
    """The corrected lines, run through preflight again, work (exit 0)."""
    code, again = run_json(doc["fix"]["prefill"], doc["fix"]["decode"])
    assert code == 0, again["headline"]
    assert again["verdict"] == "works" and again["fix"] is None


def field(doc, name: str) -> dict:
    return next(f for f in doc["compared"] + doc["not_compared"] if f["field"] == name)


# --- the lines, as SGLang's parser reads them ------------------------------------------------------

def test_the_flag_table_is_sglangs_parser():
    table = flag_table()
    assert table["--model"].dest == table["--model-path"].dest == "model_path"
    assert table["--tensor-parallel-size"].dest == "tp_size" and "--tp" not in table
    assert table["--disaggregation-transfer-backend"].default == "mooncake"
    assert table["--disaggregation-mode"].choices == ("null", "prefill", "decode")


def test_a_line_reads_as_sglangs_parser_reads_it():
    line = parse_launch(f"CUDA_VISIBLE_DEVICES=0,1 {LAUNCH} --model {QWEN} --tp 2 --page-size=16 "
                        f"--disaggregation-mode prefill --port 30000 --trust-remote-code --kv-cache-dtype fp8_e4m3")
    assert (line.model, line.tp, line.page_size, line.mode, line.kv_cache_dtype) == (QWEN, 2, 16, "prefill",
                                                                                       "fp8_e4m3")
    assert line.transfer_backend == "mooncake"          # SGLang's default when the line names none
    assert line.ignored == ("--port", "--trust-remote-code") and line.unknown == ()
    assert line.command().startswith("CUDA_VISIBLE_DEVICES=0,1 python -m sglang.launch_server")
    served = parse_launch(f"sglang serve {QWEN} --model-type llm --tensor-parallel-size 4 --attn-dp-size 2")
    assert (served.model, served.tp, served.attn_tp) == (QWEN, 4, 2)
    assert parse_launch(f"{LAUNCH} --model-path m --tp-size 4 --dp-size 4 --enable-dp-attention").attn_tp == 1
    # argparse takes no underscore spelling, and abbreviations only when they are unique
    assert parse_launch(f"{LAUNCH} --model-path m --tp_size 2").unknown == ("--tp_size",)
    with pytest.raises(UserError, match="ambiguous option: --page could match --page-size"):
        parse_launch(f"{LAUNCH} --model-path m --page 16")
    with pytest.raises(UserError, match="invalid choice: 'prefil'"):
        parse_launch(f"{LAUNCH} --model-path m --disaggregation-mode prefil")
    with pytest.raises(UserError, match="invalid int value: 'two'"):
        parse_launch(f"{LAUNCH} --model-path m --tp two")


def test_the_environment_counts_as_sglang_reads_it():
    script = (f"export SGLANG_MAMBA_SSM_DTYPE=bfloat16\nSGLANG_MAMBA_CONV_DTYPE=float16\n"
              f"{LAUNCH} --model-path m\n")
    line = parse_launch(script)
    assert line.state_env == {"SGLANG_MAMBA_SSM_DTYPE": "bfloat16"}
    assert any("SGLANG_MAMBA_CONV_DTYPE=float16 is set but not exported" in n for n in line.notes)
    flagged = parse_launch(f"SGLANG_MAMBA_SSM_DTYPE=bfloat16 {LAUNCH} --model-path m --mamba-ssm-dtype float16")
    assert flagged.state_env["SGLANG_MAMBA_SSM_DTYPE"] == "float16"       # the flag sets the variable


def test_the_engine_is_recognised_from_the_line():
    assert launches(f"{LAUNCH} --model-path m") and launches("sglang serve m")
    assert not launches("vllm serve m") and not launches("echo sglang.launch_server")


# --- verdicts ----------------------------------------------------------------------------------------

def test_qwen3_next_p_tp2_d_tp1_over_nixl_works_with_the_fields():
    p, d = lines(QWEN, "--tp 2", "--tp 1")
    code, doc = run_json(p, d)
    assert code == 0 and doc["verdict"] == "works" and doc["fix"] is None and doc["sglang"]["accepts"]
    assert doc["sglang"]["verdict"]["right"] and doc["sglang"]["verdict"]["bytes_wrong"] == 0
    assert (doc["engines"]["prefill"]["tp"], doc["engines"]["decode"]["tp"]) == (2, 1)
    assert field(doc, "attention TP (one divides the other)") == {
        "field": "attention TP (one divides the other)", "prefill": 2, "decode": 1, "agree": True}
    assert field(doc, "page size")["prefill"] == field(doc, "page size")["decode"] == 1
    assert field(doc, "transfer backend")["prefill"] == "nixl"
    # the same answer as SGLang's verdict for the model and pairing
    same = verdict(load_model("qwen3-next-80b"), 2, 1)
    assert same.right and doc["sglang"]["verdict"]["sentence"] == same.sentence().replace("qwen3-next-80b",
                                                                                         doc["sglang"]["verdict"]
                                                                                         ["model"])


def test_a_different_page_size_is_sglangs_refusal_and_the_fix_is_verified():
    result = run_cli("preflight", "--prefill-file", str(EXAMPLES / "sglang-qwen3-next-prefill.sh"),
                     "--decode-file", str(EXAMPLES / "sglang-qwen3-next-decode.sh"), "--format", "json")
    doc = json.loads(result.stdout)
    assert result.code == 1 and doc["verdict"] == "refused"
    message = doc["sglang"]["refusals"][0]["message"]
    assert message == ("Page size mismatch: prefill server has page_size=64, but decode server has page_size=1. "
                       "Both servers must use the same --page-size value.")
    assert not field(doc, "page size")["agree"]
    assert [(c["side"], c["flag"], c["new"]) for c in doc["fix"]["changes"]] == [("decode", "--page-size", "64")]
    assert "--page-size 64" in doc["fix"]["decode"] and doc["fix"]["verdict_after"] == "works"
    check_fix_works(doc)


def test_nemotron_h_p_tp1_d_tp2_shows_sglangs_wrong_bytes():
    result = run_cli("preflight", "--prefill-file", str(EXAMPLES / "sglang-nemotron-prefill.sh"),
                     "--decode-file", str(EXAMPLES / "sglang-nemotron-decode.sh"), "--format", "json")
    doc = json.loads(result.stdout)
    assert result.code == 1 and doc["verdict"] == "corrupt" and doc["sglang"]["accepts"]
    expected = verdict(load_model("nemotron-h-8b"), 1, 2)
    assert doc["sglang"]["verdict"]["bytes_wrong"] == expected.bad_bytes() == 811_008
    assert "corrupts the conv state" in doc["headline"]
    assert doc["engines"]["prefill"]["ssm_dtype_from"] == "env SGLANG_MAMBA_SSM_DTYPE"
    assert [(c["side"], c["flag"], c["new"]) for c in doc["fix"]["changes"]] == [("prefill", "--tp-size", "2")]
    check_fix_works(doc)


def test_a_misspelled_flag_is_sglangs_parser_error_with_a_suggestion_and_a_fix():
    p, d = lines("nemotron-h-8b", "--page-sise 16", "--page-size 16")
    code, doc = run_json(p, d)
    assert code == 1 and doc["verdict"] == "refused"
    refusal = doc["sglang"]["refusals"][0]
    assert refusal["code"] == "unrecognized-arguments"
    assert "unrecognized arguments: --page-sise (did you mean --page-size?)" in refusal["message"]
    assert doc["engines"]["prefill"]["unknown_flags"] == ["--page-sise"]
    assert doc["fix"]["changes"][0] == {"side": "prefill", "flag": "--page-sise", "old": "--page-sise",
                                        "new": "--page-size", "why": "the flag SGLang's parser knows"}
    check_fix_works(doc)
    code, doc = run_json(p.replace("--page-sise 16", "--page-sise=16"), d)     # --flag=value keeps its value
    assert code == 1 and "--page-size=16" in doc["fix"]["prefill"]
    check_fix_works(doc)
    table = run_cli("preflight", "--prefill", p, "--decode", d, env={"COLUMNS": "80"})
    assert table.code == 1 and table.stdout.startswith("REFUSED") and "did you mean --page-size?" in table.stdout


@pytest.mark.parametrize("p_extra, d_extra, code, fixed", [
    ("", "--kv-cache-dtype fp8_e4m3", "bootstrap", "--kv-cache-dtype"),
    ("--pp-size 2", "--pp-size 3", "bootstrap", "--pp-size"),
])
def test_what_sglangs_bootstrap_compares(p_extra, d_extra, code, fixed):
    p, d = lines("qwen3.5-0.8b", p_extra, d_extra)
    status, doc = run_json(p, d)
    assert status == 1 and doc["sglang"]["refusals"][0]["code"] == code
    assert [c["flag"] for c in doc["fix"]["changes"]] == [fixed]
    check_fix_works(doc)


def test_a_server_in_the_wrong_mode_or_on_another_backend():
    p, d = lines("qwen3.5-0.8b")
    code, doc = run_json(p, d.replace("--disaggregation-mode decode", ""))
    assert code == 1 and doc["sglang"]["refusals"][0]["code"] == "disaggregation-mode"
    assert doc["fix"]["changes"][0]["new"] == "decode"
    check_fix_works(doc)
    code, doc = run_json(p, d.replace("nixl", "mooncake"))
    assert code == 1 and doc["sglang"]["refusals"][0]["code"] == "transfer-backend"
    check_fix_works(doc)


def test_different_ssm_dtypes_at_different_tp_are_accepted_and_wrong():
    p, d = lines("nemotron-h-8b", "--tp-size 2", "--tp-size 2")
    code, doc = run_json(p, "SGLANG_MAMBA_SSM_DTYPE=bfloat16 " + d)
    assert field(doc, "SSM (temporal) dtype") == {"field": "SSM (temporal) dtype", "prefill": "float32",
                                                  "decode": "bfloat16", "agree": False}
    assert code == 1 and doc["fix"] is not None
    assert doc["fix"]["changes"][-1]["flag"] == "--mamba-ssm-dtype"
    check_fix_works(doc)


def test_a_model_sglang_does_not_serve_and_a_tp_it_does_not_start():
    code, doc = run_json(*lines("jamba"))
    assert code == 1 and doc["sglang"]["refusals"][0]["code"] == "model" and doc["fix"] is None
    code, doc = run_json(*lines("nemotron-h-8b", "--tp 3", "--tp 3"))
    assert code == 1 and doc["sglang"]["refusals"][0]["code"] == "parallel-config"


def test_the_mamba_radix_cache_strategy_sglang_refuses_under_pd():
    code, doc = run_json(*lines("qwen3.5-0.8b", "--mamba-radix-cache-strategy extra_buffer_lazy"))
    assert code == 1 and "extra_buffer_lazy unsupported under PD" in doc["sglang"]["refusals"][0]["message"]
    check_fix_works(doc)
    code, doc = run_json(*lines("qwen3.5-0.8b", "--mamba-radix-cache-strategy no_buffer --page-size 16",
                                "--page-size 16"))
    assert code == 1 and "no_buffer only supports page_size=1." in doc["sglang"]["refusals"][0]["message"]


# --- the command line -------------------------------------------------------------------------------

def test_engine_overrides_and_mixed_lines_are_one_line():
    p, d = lines("qwen3.5-0.8b")
    assert_user_error(run_cli("preflight", "--prefill", p, "--decode", "vllm serve Qwen/Qwen3.5-0.8B"),
                      "preflight pairs two servers of one engine")
    assert_user_error(run_cli("preflight", "--engine", "vllm", "--prefill", p, "--decode", d),
                      "no 'vllm serve MODEL ...'")
    forced = run_cli("preflight", "--engine", "sglang", "--prefill", p, "--decode", d)
    assert forced.code == 0 and forced.stdout.startswith("WORKS")
    assert_user_error(run_cli("preflight", "--prefill", p, "--decode", d, "--gpu", "B200"),
                      "--gpu: vLLM's option")
    assert_user_error(run_cli("preflight", "--prefill", p, "--decode", d.replace("nixl", "mori")),
                      "mambaxfer answers for SGLang's nixl and mooncake backends")
    assert_user_error(run_cli("preflight", "--prefill", p, "--decode", d + " --tp x"), "invalid int value: 'x'")


def test_the_table_fits_80_columns_and_the_fix_is_pasteable():
    result = run_cli("preflight", "--prefill-file", str(EXAMPLES / "sglang-qwen3-next-prefill.sh"),
                     "--decode-file", str(EXAMPLES / "sglang-qwen3-next-decode.sh"), env={"COLUMNS": "80"})
    assert result.code == 1 and all(len(x) <= 80 for x in result.stdout.splitlines())
    after = result.stdout.split("# decode\n", 1)[1].splitlines()
    fixed = after[:next(i for i, x in enumerate(after) if not x.startswith("  "))]
    words = shlex.split(" ".join(x.rstrip("\\") for x in fixed))
    assert parse_launch(" ".join(map(shlex.quote, words))).page_size == 64


def test_the_report_in_process():
    p, d = lines(QWEN, "--tp 2", "--tp 1")
    report = preflight(parse_launch(p), parse_launch(d, "--decode"), load_model)
    assert report.exit_code == 0 and report.headline().startswith("WORKS: SGLang 0.5.23 accepts this pairing")


def test_junit_names_sglangs_verdict(tmp_path):
    junit = tmp_path / "preflight.xml"
    result = run_cli("preflight", "--prefill-file", str(EXAMPLES / "sglang-qwen3-next-prefill.sh"),
                     "--decode-file", str(EXAMPLES / "sglang-qwen3-next-decode.sh"), "--junit", str(junit))
    assert result.code == 1
    text = junit.read_text()
    assert 'name="SGLang 0.5.23 accepts the pairing"' in text and "Page size mismatch" in text
    assert "--page-size 64" in text      # the fix, with the corrected lines


# --- against SGLang's own parser, where SGLang is installed -------------------------------------------

SGLANG_ARGVS = [
    ["--model-path", "m", "--tp", "2", "--page-size=16", "--disaggregation-mode", "prefill"],
    ["--model", "m", "--tensor-parallel-size", "4", "--attn-dp-size", "2", "--kv-cache-dtype", "fp8_e4m3"],
    ["--model-path", "m", "--disaggregation-transfer-backend", "nixl", "--mamba-ssm-dtype", "bfloat16",
     "--pp-size", "2", "--disaggregation-bootstrap-port", "9000", "--mamba-radix-cache-strategy", "no_buffer"],
    ["--model-path", "m", "--page-sise", "16"],
    ["--model-path", "m", "--tp_size", "2"],
    ["--model-path", "m", "--page", "16"],
    ["--model-path", "m", "--disaggregation-mode", "prefil"],
]
COMPARED = {"model_path": "model", "tp_size": "tp", "page_size": "page_size", "disaggregation_mode": "mode",
            "kv_cache_dtype": "kv_cache_dtype", "attn_dp_size": "attn_dp", "pp_size": "pp",
            "disaggregation_transfer_backend": "transfer_backend", "mamba_ssm_dtype": "mamba_ssm_dtype",
            "disaggregation_bootstrap_port": "bootstrap_port", "mamba_radix_cache_strategy": "radix_strategy"}
PARSE = """
import argparse, contextlib, io, json, sys
from sglang.srt.server_args import ServerArgs
out = []
for argv in json.loads(sys.argv[1]):
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
        out.append({k: getattr(args, k) for k in json.loads(sys.argv[2])})
    except SystemExit:
        out.append({"error": err.getvalue().strip().splitlines()[-1]})
print(json.dumps(out))
"""


# Then scripts/sglang_launch_flags.py in the same process (SGLang imported once), writing argv[4].
FLAGS = """
import runpy
sys.argv = sys.argv[3:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_lines_read_as_sglangs_own_parser_reads_them(tmp_path):
    """Each argv through SGLang 0.5.23's own parser (its interpreter, MAMBAXFER_TEST_SGLANG_0_5_23)
    and through ``parse_launch``: the same values, and an error where SGLang's parser exits; the
    option table is the one its parser builds."""
    import os
    import subprocess
    import sys

    from test_sglang_conformance import sglang_python

    python = sglang_python()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    written = tmp_path / "launch_flags.json"
    done = subprocess.run([python, "-c", PARSE + FLAGS, json.dumps(SGLANG_ARGVS), json.dumps(list(COMPARED)),
                           str(ROOT / "scripts" / "sglang_launch_flags.py"), str(written)],
                          capture_output=True, text=True, timeout=1800, env=env, cwd=ROOT.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    for argv, answer in zip(SGLANG_ARGVS, theirs):
        text = f"{LAUNCH} {' '.join(argv)}"
        if "error" in answer:
            try:
                line = parse_launch(text)
            except UserError as exc:
                assert answer["error"].split("error: ", 1)[1].split(" (choose")[0] in str(exc), (argv, answer)
                continue
            assert line.unknown and "unrecognized arguments" in answer["error"], (argv, answer)
            assert answer["error"].endswith(" ".join(line.words[line.occurrences["?" + line.unknown[0]][0].start:]))
            continue
        line = parse_launch(text)
        for dest, key in COMPARED.items():
            if answer[dest] is not None:
                assert getattr(line, key) == answer[dest], (argv, dest)
    table = Path(sys.modules["mambaxfer_cli.engines.sglang.launch_args"].__file__).parent / "releases"
    assert json.loads(written.read_text()) == json.loads((table / "v0_5_23" / "launch_flags.json").read_text())


def test_kimi_k3_is_preflighted_with_sglang_s_kda_state(tmp_path):
    source = Path(__file__).with_name("fixtures") / "hf-configs" / "kimi-k3.example.json"
    (tmp_path / "config.json").write_text(source.read_text())
    p, d = lines(str(tmp_path), "--tp 1", "--tp 2")
    code, doc = run_json(p, d)
    assert code == 0 and doc["verdict"] == "works", doc
    text = run_cli("preflight", "--prefill", p, "--decode", d).stdout
    # conv (K-1) x 3 * 96 * 128 / TP in bfloat16, temporal 96 / TP heads of 128 x 128 in float32
    assert "221184 + 6291456" in text and "110592 + 3145728" in text and "vLLM" not in text


# --- the fix does what a person would: drop, respell, the nearest TP size -------------------------

def fix_changes(doc) -> list[tuple]:
    return [(c["side"], c["flag"], c["old"], c["new"]) for c in doc["fix"]["changes"]]


@pytest.mark.parametrize("flag, value", [
    ("--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'),   # vLLM's
    ("--block-size", "64"),
    ("--max-model-len", "4096"),
])
def test_a_flag_sglang_does_not_take_is_dropped_with_its_value(flag, value):
    # Not respelled as a flag merely alike (--kv-events-config, --dcp-size, --model-impl): another option.
    p, d = lines(QWEN, f"--page-size 64 {flag} {shlex.quote(value)}", "--page-size 64")
    code, doc = run_json(p, d)
    assert code == 1 and doc["sglang"]["refusals"][0]["code"] == "unrecognized-arguments"
    assert "did you mean" not in doc["headline"]
    assert fix_changes(doc) == [("prefill", flag, value, None)]
    assert shlex.split(doc["fix"]["prefill"]) == shlex.split(p)[:-2]
    assert doc["fix"]["changed"] == ["prefill"]
    check_fix_works(doc)


def test_vllms_tp_spelling_is_respelled_as_sglangs_and_only_that_line_is_printed():
    p, d = lines(QWEN, "--page-size 64 -tp 2", "--page-size 64 --tp-size 2")
    code, doc = run_json(p, d)
    assert code == 1 and "did you mean --tp-size?" in doc["headline"]
    assert fix_changes(doc) == [("prefill", "-tp", "-tp", "--tp-size")]
    assert "--tp-size 2" in doc["fix"]["prefill"]
    check_fix_works(doc)
    code, doc = run_json(p.replace("-tp 2", "-pp 2"), d.replace("--tp-size", "--pp-size"))   # --pp abbreviates 3
    assert fix_changes(doc) == [("prefill", "-pp", "-pp", "--pp-size")]
    check_fix_works(doc)
    result = run_cli("preflight", "--prefill", p, "--decode", d, env={"COLUMNS": "80"})
    fix = result.stdout.split("\nFix\n", 1)[1].splitlines()
    assert fix[1:3] == ["  corrected command line (verified: works):", "  # prefill"]
    assert "  # decode" not in fix and max(map(len, result.stdout.splitlines())) <= 80


@pytest.mark.parametrize("tp, moved", [("3", "2"), ("5", "4"), ("7", "8")])
def test_a_tp_size_sglang_does_not_serve_moves_to_the_nearest_that_works(tp, moved):
    # Qwen3-Next's 16 key heads: TP 1, 2, 4, 8 and 16. D at TP 1: P's move is its own, not D's size.
    p, d = lines(QWEN, f"--page-size 64 --tp {tp}", "--page-size 64")
    code, doc = run_json(p, d)
    assert code == 1 and doc["sglang"]["refusals"][0]["code"] == "parallel-config"
    assert fix_changes(doc) == [("prefill", "--tp-size", tp, moved)]
    where = "below" if int(moved) < int(tp) else "above"
    assert f"; {moved} is the nearest size {where} that starts and works" in doc["fix"]["changes"][0]["why"]
    check_fix_works(doc)


def test_a_respelled_tp_flag_whose_size_sglang_does_not_serve_is_one_change():
    p, d = lines(QWEN, "--page-size 64 -tp 3", "--page-size 64")
    code, doc = run_json(p, d)
    assert fix_changes(doc) == [("prefill", "--tp-size", "3", "2")]
    assert doc["fix"]["changes"][0]["why"].startswith("in place of -tp, which SGLang's parser does not take; TP 3 ")
    check_fix_works(doc)


def test_a_stray_word_is_dropped():
    p, d = lines(QWEN, "--page-size 64 stray", "--page-size 64")
    code, doc = run_json(p, d)
    assert code == 1 and fix_changes(doc) == [("prefill", "stray", None, None)]
    check_fix_works(doc)
