"""What a newcomer meets first: output through a pipe and in an 80-column terminal, the documented
conformance set-up (the one CI runs), GPU names as nvidia-smi prints them, exit codes in --help."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from cli_run import assert_user_error, commands, run_cli

ROOT = Path(__file__).resolve().parents[1]
AMD = "ROCm platforms are not modelled"


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    return {**env, "NO_COLOR": "1", **extra}


def _piped(*args: str, **env: str) -> subprocess.CompletedProcess:
    """The command with its stdout and stderr through real pipes."""
    return subprocess.run([sys.executable, "-m", "mambaxfer_cli", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=_env(**env), timeout=120)


def _in_terminal(*args: str, columns: int = 80, raw: bool = False, **env: str) -> tuple[int, str]:
    """The command in a real terminal (a pty) of ``columns`` columns: its code and what it showed
    (``raw``: with the terminal's control sequences)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "mambaxfer_cli", *args], stdin=follower, stdout=follower,
                            stderr=follower, env=_env(TERM="xterm", **env), close_fds=True)
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:       # the terminal's other end closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    code = proc.wait(timeout=60)
    if raw:
        return code, b"".join(chunks).decode()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode())
    return code, text.replace("\r\n", "\n")


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


# --- 1. piped output and errors ---------------------------------------------------------------------

def test_piped_output_is_80_columns_without_COLUMNS():
    result = _piped("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "4")
    assert result.returncode == 0, result.stderr
    assert _widest(result.stdout) <= 80


def test_piped_output_follows_COLUMNS():
    wide = _piped("check", "--model", "granite-4.0-h-tiny", "--pairs", "2:1", COLUMNS="200")
    narrow = _piped("check", "--model", "granite-4.0-h-tiny", "--pairs", "2:1", COLUMNS="60")
    assert _widest(narrow.stdout) <= 60 < _widest(wide.stdout) <= 200


def test_piped_json_and_yaml_are_never_wrapped():
    result = _piped("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "4", "--format", "json", COLUMNS="40")
    assert json.loads(result.stdout)["schema"] == "mambaxfer.plan/v1"


def test_an_error_wraps_between_words_in_an_80_column_terminal():
    code, shown = _in_terminal("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--gpu", "MI300X")
    assert code == 2, shown
    assert _widest(shown) <= 80 < len(shown.strip())        # wrapped: it would not fit one line
    assert AMD in " ".join(shown.split())                   # every word whole
    assert "Traceback" not in shown


def test_an_error_through_a_pipe_wraps_at_COLUMNS_else_is_one_line():
    result = _piped("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--gpu", "MI300X")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1 and AMD in result.stderr
    result = _piped("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--gpu", "MI300X", COLUMNS="50")
    assert result.returncode == 2
    assert _widest(result.stderr) <= 50 and AMD in " ".join(result.stderr.split())


def test_a_table_in_an_80_column_terminal_fits():
    code, shown = _in_terminal("check", "--model", "jamba", "--pairs", "1:2")
    assert code == 0, shown
    assert _widest(shown) <= 80


# --- 2. the conformance set-up: the documented lines are what CI runs ------------------------------

FAKE_PYTHON3 = """#!/usr/bin/env bash
# python3 as far as .ci/vllm-envs uses it: 'python3 -m venv DIR' makes DIR/bin/python, which logs.
echo "python3 $*" >>"$LOG"
[ "$1 $2" = "-m venv" ] || exit 0
mkdir -p "$3/bin" "$3/lib"
cat >"$3/bin/python" <<EOF
#!/usr/bin/env bash
echo "\\$0 \\$*" >>"\\$LOG"
case "\\$2" in
  *purelib*) echo "$3/lib" ;;
  *importlib.metadata*) case "$3" in *0.33) echo 0.33.0 ;; *) echo 0.34.0 ;; esac ;;
esac
EOF
chmod +x "$3/bin/python"
"""


def _documented_setup() -> list[str]:
    text = (ROOT / "docs/conformance.md").read_text()
    block = text.split("<!-- conformance-setup -->", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return block.splitlines()


def test_the_documented_setup_uses_the_clone_and_no_registry_name():
    lines = _documented_setup()
    assert lines[0].startswith("envs=")
    assert any("pip install vllm==0.33.0" in line for line in lines)
    assert any("pip install --no-deps vllm==0.34.0" in line for line in lines)
    assert sum(line.endswith("pip install --no-deps -e .") for line in lines) == 2
    for page in (ROOT / "docs/conformance.md", ROOT / "mambaxfer_cli/engines/vllm/conformance/__init__.py"):
        assert "--no-deps mambaxfer" not in page.read_text(), page


def test_ci_builds_the_vllm_environments_with_the_documented_lines(tmp_path):
    bin_dir, log = tmp_path / "bin", tmp_path / "log"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON3)
    (bin_dir / "python3").chmod(0o755)
    envs = tmp_path / "envs"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(log)}
    result = subprocess.run(["bash", ".ci/vllm-envs", str(envs)], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"MAMBAXFER_TEST_VLLM_0_34={envs}/vllm-0.34/bin/python" in result.stdout
    ran = log.read_text().splitlines()
    # every documented command that runs a program ran, in the documented order, with envs=DIR
    documented = [line.replace("$envs", str(envs)) for line in _documented_setup()[1:]
                  if line.startswith(("python3", "$envs"))]
    pip_or_venv = [line for line in ran if " -m pip " in line or " -m venv " in line]
    assert pip_or_venv == documented
    assert (envs / "vllm-0.34/lib/zz-vllm-0.33-dependencies.pth").read_text().strip() == \
        f"import site; site.addsitedir('{envs}/vllm-0.33/lib')"


def test_conformance_without_vllm_says_how_to_set_it_up():
    pytest.importorskip("rich")
    from mambaxfer_cli.engines.vllm.conformance import NOT_INSTALLED

    assert "pip install --no-deps -e ." in NOT_INSTALLED and "vllm==0.33.0" in NOT_INSTALLED


# --- 3. the README's test command and its sentence say the same ----------------------------------

def test_the_readme_test_sentence_matches_its_command():
    readme = (ROOT / "README.md").read_text()
    before, after = readme.split("<!-- test-command -->", 1)
    sentence = before.rstrip().splitlines()[-1]
    command = after.split("```bash\n", 1)[1].split("\n", 1)[0]
    cpu_wheel = "download.pytorch.org/whl/cpu" in command
    assert ("CPU build" in sentence) == cpu_wheel, (sentence, command)


# --- 4. GPU names ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name, table", [
    ("a100-80gb", "A100"), ("H100-SXM", "H100"), ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA B200", "B200"),
    ("nvidia a100-sxm4-80gb", "A100"), ("NVIDIA H100 PCIe", "H100"), ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000"), ("h200 nvl", "H200"),
    ("NVIDIA H100 80GB HBM3/cu12", "H100"),
])
def test_gpu_names_as_nvidia_smi_and_clouds_print_them(name, table):
    from mambaxfer_cli.engines.vllm.gpu import gpu

    assert gpu(name).name == table


@pytest.mark.parametrize("name", ["H100 foo", "P100", "NVIDIA"])
def test_other_gpu_names_are_still_refused(name):
    from mambaxfer_cli.engines.vllm.gpu import gpu
    from mambaxfer_cli.errors import UserError

    with pytest.raises(UserError, match="unknown GPU"):
        gpu(name)


@pytest.mark.parametrize("name", ["MI300X", "AMD Instinct MI250X", "mi325x"])
def test_an_amd_gpu_is_one_line_saying_rocm_is_not_modelled(name):
    result = run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--gpu", name)
    assert_user_error(result, AMD)


# --- 5. exit codes in every --help ------------------------------------------------------------------

def test_every_command_help_gives_its_exit_codes():
    for name in commands():
        result = run_cli(name, "--help")
        words = " ".join(result.stdout.split())
        assert result.code == 0 and "Exit codes: 0 " in words and "2 a usage error" in words, name
    plan = " ".join(run_cli("plan", "--help").stdout.split())
    assert "0 the plan was printed, also when it says vLLM refuses the pairing" in plan


# --- 6. small gaps ----------------------------------------------------------------------------------

def test_preset_names_match_any_case():
    upper = run_cli("plan", "--model", "Jamba", "--p-tp", "1", "--d-tp", "4", "--format", "json")
    lower = run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "4", "--format", "json")
    assert upper.code == 0, upper.stderr
    assert json.loads(upper.stdout)["model"] == json.loads(lower.stdout)["model"]


def test_schema_without_a_name_lists_the_documents():
    from mambaxfer_cli.schema import DOCUMENTS

    result = run_cli("schema")
    assert result.code == 0
    assert not result.stdout.lstrip().startswith("{")
    for name in DOCUMENTS:
        assert f"mambaxfer.{name}/v1" in result.stdout


def test_a_pure_mamba_plan_names_no_attention_streams():
    result = run_cli("plan", "--model", "mamba-codestral-7b", "--p-tp", "1", "--d-tp", "1")
    words = " ".join(result.stdout.split())
    assert "attention streams" not in words
    assert "64 whole-block streams (no attention layers)" in words
    hybrid = " ".join(run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "1").stdout.split())
    assert "4 attention streams" in hybrid


def test_a_pattern_longer_than_num_hidden_layers_wins_as_in_vllm_and_says_so(tmp_path):
    import yaml

    config = yaml.safe_load((ROOT / "mambaxfer_cli/presets/nemotron-h-8b.yaml").read_text())["config"]
    pattern = config["hybrid_override_pattern"] + "M-M-"        # 56 entries against 52 layers
    config.update(hybrid_override_pattern=pattern, num_hidden_layers=len(pattern) - 4)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = run_cli("plan", "--model", str(path), "--p-tp", "1", "--d-tp", "1", "--format", "json")
    model = json.loads(result.stdout)["model"]
    # vLLM's NemotronHModel makes one layer per pattern entry
    assert model["ssm_layers"] == pattern.count("M") and model["attention_layers"] == pattern.count("*")
    assert "num_hidden_layers 52 ignored" in model["origin"]["layers"]
    table = " ".join(run_cli("plan", "--model", str(path), "--p-tp", "1", "--d-tp", "1").stdout.split())
    assert "layers: from hybrid_override_pattern (56 layers; num_hidden_layers 52 ignored" in table


def test_the_check_title_wraps_at_the_terminal_not_the_table():
    code, shown = _in_terminal("check", "--model", "jamba", "--pairs", "1:2")
    assert code == 0
    lines = [line.strip() for line in re.split(r"[\r\n]", shown)]     # a progress bar redraws with \r
    title = "mambaxfer check: exact plan and vLLM 0.34 on H100 (SM 9.0, CUDA 13)"
    assert title in lines and lines[lines.index(title) + 1].startswith("┏"), shown


def test_piped_yaml_keeps_long_values_on_one_line():
    import yaml

    result = _piped("plan", "--model", "mamba-130m", "--p-tp", "2", "--d-tp", "1", "--format", "yaml", COLUMNS="40")
    document = yaml.safe_load(result.stdout)
    for warning in document["warnings"]:     # each message whole on its own line, however long
        assert f"message: {yaml.safe_dump(warning['message'], width=1 << 30).splitlines()[0]}" in result.stdout
    assert _widest(result.stdout) > 120


@pytest.mark.usefixtures("nixl")
@pytest.mark.parametrize("rank,args", [
    ("D0", ("execute", "--model", "qwen3.5-0.8b", "--layers", "4", "--p-tp", "1", "--d-tp", "2", "--device", "cpu")),
    ("P0", ("execute", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--layers", "4", "--p-tp", "1", "--d-tp",
            "2", "--device", "cpu")),
    ("P0", ("bench", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--layers", "4", "--p-tp", "1", "--d-tp",
            "2", "--iters", "3")),
], ids=["execute", "execute-sglang", "bench-sglang"])
def test_a_failed_run_leaves_its_line_on_the_terminal(rank, args):
    """In a terminal the ranks' live table is erased when the run ends; the failure's one line
    comes after that, so it stays on the screen (it used to be erased with the table)."""
    code, shown = _in_terminal(*args, raw=True, MAMBAXFER_EXECUTE_FAULT=f"{rank}:die@transfer")
    assert code == 3
    assert "\x1b[2K" in shown, "the live table was drawn and erased"
    assert shown.rfind("error:") > shown.rfind("\x1b[2K"), shown[-600:]
    assert f"{rank} died" in shown[shown.rfind("error:"):]
