"""preflight --prefill-file / --decode-file read launch scripts as bash runs them: variables from
the script, its defaults and the caller's environment (``--env`` over it), comments that end at
the newline, quoted words that are no assignment, and one line for what only running it tells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_run import assert_user_error, messages, run_cli
from mambaxfer_cli.engines.sglang.launch_args import parse_launch
from mambaxfer_cli.engines.vllm.serve_args import parse_serve
from mambaxfer_cli.errors import UserError

NIXL = '{"kv_connector":"NixlConnector","kv_role":"kv_%s"}'
SGLANG = "python3 -m sglang.launch_server"

VLLM_SCRIPT = """#!/usr/bin/env bash
# {side} engine for Nemotron-H: the model and TP size come from the caller, with defaults.
set -euo pipefail

MODEL="${{MODEL:-nvidia/Nemotron-H-8B-Base-8K}}"
TP=${{TP:-{tp}}}
LOG_DIR=${{LOG_DIR:-/var/log/vllm}}
PORT=$(( 8100 + {tp} ))
HOST_IP=$(hostname -I | awk '{{print $1}}')
EXTRA_ARGS="--gpu-memory-utilization 0.9 --max-model-len 8192"
export VLLM_SSM_CONV_STATE_LAYOUT=DS

mkdir -p "$LOG_DIR"
echo "starting ${{MODEL}} with TP ${{TP}} on $HOST_IP"
exec vllm serve "$MODEL" \\
    --tensor-parallel-size "$TP" \\
    --host "$HOST_IP" --port "$PORT" \\
    $EXTRA_ARGS "$@" \\
    --kv-transfer-config '{kv}' \\
    > "$LOG_DIR/{side}.log" 2>&1
"""


def vllm_scripts(tmp_path: Path, p_tp: int = 1, d_tp: int = 2) -> tuple[str, str]:
    p, d = tmp_path / "prefill.sh", tmp_path / "decode.sh"
    p.write_text(VLLM_SCRIPT.format(side="prefill", tp=p_tp, kv=NIXL % "producer"))
    d.write_text(VLLM_SCRIPT.format(side="decode", tp=d_tp, kv=NIXL % "consumer"))
    return str(p), str(d)


def preflight_json(p: str, d: str, *extra: str, env: dict | None = None):
    result = run_cli("preflight", "--prefill-file", p, "--decode-file", d, "--format", "json", *extra, env=env)
    assert "Traceback" not in result.stderr, result.stderr
    return result.code, json.loads(result.stdout)


# --- variables ---------------------------------------------------------------------------------

def test_a_script_with_variables_defaults_and_exports_resolves_as_bash_does(tmp_path):
    p, d = vllm_scripts(tmp_path)
    code, doc = preflight_json(p, d)
    assert code == 0, doc["headline"]
    prefill, decode = doc["engines"]["prefill"], doc["engines"]["decode"]
    assert (prefill["model"], prefill["tp"], decode["tp"]) == ("nvidia/Nemotron-H-8B-Base-8K", 1, 2)
    assert prefill["conv_layout"] == decode["conv_layout"] == "DS"
    # $EXTRA_ARGS splits into its words; "$@" (no arguments) is none; the redirection is dropped
    assert "--gpu-memory-utilization 0.9 --max-model-len 8192 --kv-transfer-config" in decode["command"]


def test_the_callers_environment_and_env_give_the_variables(tmp_path):
    p, d = vllm_scripts(tmp_path)
    code, doc = preflight_json(p, d, env={"TP": "4"})
    assert (doc["engines"]["prefill"]["tp"], doc["engines"]["decode"]["tp"]) == (4, 4)
    code, doc = preflight_json(p, d, "--env", "TP=2", env={"TP": "4"})     # --env wins
    assert (doc["engines"]["prefill"]["tp"], doc["engines"]["decode"]["tp"]) == (2, 2)


@pytest.mark.parametrize("script, environ, tp, model", [
    ('TP=2\nvllm serve "${MODEL-m}" -tp "${TP:-4}"', {}, 2, "m"),
    ('TP=\nvllm serve "${MODEL-m}" -tp "${TP:-4}"', {"MODEL": ""}, 4, ""),       # - keeps a set empty value
    ('vllm serve ${M:=m} -tp 1 --served-model-name "$M"', {}, 1, "m"),         # := assigns
    ('TP=2; export TP\nvllm serve m -tp $TP', {}, 2, "m"),
    ("vllm serve m -tp 2 --served-model-name '$NOWHERE'", {}, 2, "m"),          # single quotes: no expansion
    ('TP=2 vllm serve m -tp 3 --served-model-name "$TP"', {"TP": "9"}, 3, "m"),  # a prefix is not its words'
])
def test_expansions_as_bash_makes_them(script, environ, tp, model):
    line = parse_serve(script, "--prefill-file p.sh", environ)
    assert (line.tp, line.model) == (tp, model)


def test_a_prefix_or_export_reaches_the_engine_and_a_plain_variable_does_not():
    line = parse_serve("LAYOUT=DS\nVLLM_SSM_CONV_STATE_LAYOUT=$LAYOUT vllm serve m")
    assert line.conv_layout == "DS"
    line = parse_serve("VLLM_SSM_CONV_STATE_LAYOUT=DS\nvllm serve m", environ={"VLLM_SSM_CONV_STATE_LAYOUT": "SD"})
    assert line.conv_layout == "DS"          # an inherited variable stays exported when the script sets it


# --- what only running the script tells ----------------------------------------------------------

@pytest.mark.parametrize("line, fragments", [
    ('MODEL=$(cat /etc/model-name)\nvllm serve "$MODEL"',
     ["--decode-file", "line 6", "MODEL is set by running the script on line 5", "--env MODEL=VALUE"]),
    ('vllm serve nvidia/Nemotron-H-8B-Base-8K -tp "$TP"',
     ["line 5", "$TP is set nowhere in the script and not in the environment", "--env TP=VALUE"]),
    ("vllm serve nvidia/Nemotron-H-8B-Base-8K -tp $(( 1 + 1 ))", ["$(( 1 + 1 )) is arithmetic", "--env"]),
    ("vllm serve nvidia/Nemotron-H-8B-Base-8K -tp `nproc`", ["`nproc` is a command substitution"]),
    ("vllm serve nvidia/Nemotron-H-8B-Base-8K -tp ${TP//x/y}", ["${TP//x/y} is an expansion"]),
])
def test_what_only_running_the_script_tells_is_one_line_naming_it(tmp_path, line, fragments):
    decode = tmp_path / "deployed.sh"
    decode.write_text(f"#!/bin/bash\nset -euo pipefail\n# decode engine\n\n{line}\n")
    p, _ = vllm_scripts(tmp_path)
    result = run_cli("preflight", "--prefill-file", p, "--decode-file", str(decode))
    assert_user_error(result, *fragments)
    assert len(messages(result.stderr.strip())) == 1 and result.stdout == ""


def test_env_gives_what_the_script_computes(tmp_path):
    decode = tmp_path / "deployed.sh"
    decode.write_text("#!/bin/bash\nMODEL=$(cat /etc/model-name)\nexport VLLM_SSM_CONV_STATE_LAYOUT=DS\n"
                      f"vllm serve \"$MODEL\" -tp 2 --kv-transfer-config '{NIXL % 'consumer'}'\n")
    p, _ = vllm_scripts(tmp_path)
    code, doc = preflight_json(p, str(decode), "--env", "MODEL=nvidia/Nemotron-H-8B-Base-8K")
    assert code == 0 and doc["engines"]["decode"]["model"] == "nvidia/Nemotron-H-8B-Base-8K"
    assert_user_error(run_cli("preflight", "--prefill-file", p, "--decode-file", str(decode), "--env", "MODEL"),
                      "--env 'MODEL': give NAME=VALUE")


def test_an_unknown_value_the_engine_does_not_read_is_no_error():
    line = parse_serve('vllm serve m -tp 2 --host "$(hostname -I)" --port=$((8000 + RANK))')
    assert line.tp == 2
    with pytest.raises(UserError, match="VLLM_SSM_CONV_STATE_LAYOUT is set by running the script"):
        parse_serve("export VLLM_SSM_CONV_STATE_LAYOUT=$(cat layout)\nvllm serve m")


@pytest.mark.parametrize("prefill, decode", [
    ("vllm serve jamba", "MODEL=no-such-model\nvllm serve $MODEL\n"),
    (f"{SGLANG} --model-path jamba", f"MODEL=no-such-model\n{SGLANG} --model-path $MODEL\n"),
])
def test_an_unknown_model_in_a_script_names_the_file_option(tmp_path, prefill, decode):
    path = tmp_path / "decode.sh"
    path.write_text(decode)
    result = run_cli("preflight", "--prefill", prefill, "--decode-file", str(path))
    assert_user_error(result, f"--decode-file {path}: unknown model 'no-such-model'")


# --- comments end at the newline -----------------------------------------------------------------

def test_a_backslash_ending_a_comment_does_not_swallow_the_vllm_export():
    line = parse_serve("# the NIXL worker needs DS \\\nexport VLLM_SSM_CONV_STATE_LAYOUT=DS\nvllm serve m\n")
    assert line.conv_layout == "DS"


def test_a_backslash_ending_a_comment_does_not_swallow_the_sglang_export(tmp_path):
    p, d = tmp_path / "prefill.sh", tmp_path / "decode.sh"
    body = ("#!/usr/bin/env bash\nset -euo pipefail\nMODEL=${{MODEL:-nvidia/Nemotron-H-8B-Base-8K}}\n{extra}"
            "{launch} --model-path \"$MODEL\" \\\n    --disaggregation-mode {mode} "
            "--disaggregation-transfer-backend nixl --port {port}\n")
    p.write_text(body.format(extra="", launch=SGLANG, mode="prefill", port=30000))
    d.write_text(body.format(extra="# keep the SSM state small \\\nexport SGLANG_MAMBA_SSM_DTYPE=float16\n",
                             launch=SGLANG, mode="decode", port=30001))
    code, doc = preflight_json(str(p), str(d))
    assert doc["engine"] == "sglang" and doc["engines"]["decode"]["environment"] == {
        "SGLANG_MAMBA_SSM_DTYPE": "float16"}
    assert code == 1 and doc["verdict"] != "works", doc["headline"]
    assert "temporal (SSM)" in doc["headline"]


# --- the command bash runs -------------------------------------------------------------------------

@pytest.mark.parametrize("side", ["vllm", "sglang"])
def test_a_quoted_name_is_a_command_that_is_not_found(side):
    text = ("'SGLANG_MAMBA_SSM_DTYPE'=bfloat16 python -m sglang.launch_server --model-path m" if side == "sglang"
            else "'VLLM_SSM_CONV_STATE_LAYOUT'=DS vllm serve m")
    parse = parse_launch if side == "sglang" else parse_serve
    with pytest.raises(UserError, match=r"line 1: bash runs '\w+=\w+' as a command, not as an assignment .*never "
                                        r"starts"):
        parse(text, "--decode")


def test_the_interpreter_must_be_python():
    with pytest.raises(UserError, match="is not python"):
        parse_launch("$'\\u202epython' -m sglang.launch_server --model-path m")
    with pytest.raises(UserError, match="is not python"):
        parse_launch("echo -m sglang.launch_server --model-path m")
    with pytest.raises(UserError, match=r"line 1: \$PY is set nowhere .* --env PY=VALUE"):
        parse_launch('"$PY" -m sglang.launch_server --model-path m', "--decode-file d.sh")
    for python in ("python", "python3", "python3.12", "/opt/venv/bin/python3", "uv run python", "$PY"):
        assert parse_launch(f"{python} -m sglang.launch_server --model-path m", environ={"PY": "python3"}).model == "m"


def test_the_quoted_sglang_assignment_through_the_cli_is_one_line():
    flags = "--model-path nvidia/Nemotron-H-8B-Base-8K --disaggregation-transfer-backend nixl"
    result = run_cli("preflight", "--prefill", f"{SGLANG} {flags} --disaggregation-mode prefill",
                     "--decode", f"'SGLANG_MAMBA_SSM_DTYPE'=bfloat16 {SGLANG} {flags} --disaggregation-mode decode")
    assert_user_error(result, "--decode line 1: bash runs 'SGLANG_MAMBA_SSM_DTYPE=bfloat16' as a command")
    assert len(messages(result.stderr.strip())) == 1


def test_an_unclosed_quote_is_the_same_line_on_both_engines():
    errors = []
    for good, bad in (("vllm serve jamba", "vllm serve 'jamba"),
                      (f"{SGLANG} --model-path jamba", f"{SGLANG} --model-path 'jamba")):
        result = run_cli("preflight", "--prefill", good, "--decode", bad)
        assert_user_error(result, "--decode: cannot read the command line: No closing quotation")
        errors.append(result.stderr)
    assert errors[0] == errors[1]


# --- bash itself as the reference ------------------------------------------------------------------

BASH_CASES = [
    'MODEL="${MODEL:-a/b}"\nTP=${TP:-2}\nvllm serve "$MODEL" -tp "$TP"',
    'FLAGS="--max-model-len 8192   --port 1"\nvllm serve m $FLAGS "$FLAGS" "$@"',
    "X='a $b'; export X\nvllm serve \"$X\" --served-model-name '$X' $'tab\\there'",
    'unset TP\nvllm serve "${MODEL-dflt}" --served-model-name ${TP:=3} "$TP" ${TP:+set} ${NOPE+alt}',
    '# a comment \\\nexport VLLM_SSM_CONV_STATE_LAYOUT=DS\nvllm serve m',
    'VLLM_SSM_CONV_STATE_LAYOUT=DS\nvllm serve m\n',
    'L=DS\nVLLM_SSM_CONV_STATE_LAYOUT=$L exec vllm serve "m"x\'y\' --served-model-name "" \\\n  -tp 2 2>&1 | cat',
    'MODEL=c/d\nif true; then :; fi\nvllm serve "${MODEL}" --hf-overrides \'{"a": "$x"}\' -tp "${TP:-1}"',
    "cat > /dev/null <<'EOF'\nit's $(not run) \"\nEOF\nexport VLLM_SSM_CONV_STATE_LAYOUT=DS\nvllm serve m",
    'cat <<-END >/dev/null; PY=3\n\tdon\'t\n\tEND\nvllm serve m -tp "$PY"',
]


@pytest.mark.parametrize("script", BASH_CASES)
def test_the_words_and_layout_are_the_ones_bash_gives_the_server(tmp_path, script):
    import os
    import shutil
    import subprocess

    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("no bash")
    fake = tmp_path / "bin" / "vllm"
    fake.parent.mkdir()
    fake.write_text('#!/usr/bin/env python3\nimport json, os, sys\n'
                    'print(json.dumps([sys.argv[1:], os.environ.get("VLLM_SSM_CONV_STATE_LAYOUT")]))\n')
    fake.chmod(0o755)
    path = tmp_path / "serve.sh"
    path.write_text(script)
    environ = {"PATH": f"{fake.parent}:{os.environ['PATH']}", "MODEL": "", "TP": "7"}
    ran = subprocess.run([bash, str(path)], capture_output=True, text=True, env=environ, timeout=30)
    words, layout = json.loads(ran.stdout.splitlines()[-1])
    line = parse_serve(script, "--prefill-file serve.sh", environ)
    assert (list(line.words[1:]), line.conv_layout) == (words, layout)
