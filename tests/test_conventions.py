"""Command-line conventions: --version, -h, completion, one-line usage errors, a closed pipe, the
internal-error exit code, and output that fits 80 (or 60) columns without cutting a value."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from cli_run import assert_user_error, messages, run_cli
from mambaxfer_cli import __version__
from mambaxfer_cli.readers.model_source import load_model, preset_names

CLI = [sys.executable, "-m", "mambaxfer_cli"]


def test_version():
    for flag in ("--version", "-V"):
        result = run_cli(flag)
        assert result.code == 0 and result.stdout.strip() == f"mambaxfer {__version__}"


def test_dash_h_is_help():
    for args in (("-h",), ("plan", "-h"), ("check", "-h")):
        short, long = run_cli(*args), run_cli(*args[:-1], "--help")
        assert short.code == 0 and short.stdout == long.stdout and "Usage: mambaxfer" in short.stdout


def test_help_groups_options_and_ends_with_examples():
    text = run_cli("check", "--help", env={"COLUMNS": "120"}).stdout
    for panel in ("Model", "Engines", "Request", "Output"):
        assert f"─ {panel} " in text
    assert "--coalesce/--no-coalesce" not in text   # shown as two names: the switch, its "off" in its help
    assert " --coalesce " in text and "Off: --no-coalesce." in " ".join(text.replace("│", " ").split())
    assert "Examples" in text and "mambaxfer check --model" in text


def test_shell_completion_script():
    """--show-completion finds the shell it runs in from its parent processes, as from a user's bash
    (the ``; exit`` keeps bash from replacing itself with the command)."""
    import shlex
    import subprocess
    import sys

    command = f"{shlex.quote(sys.executable)} -m mambaxfer_cli --show-completion; exit $?"
    result = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "_mambaxfer_completion" in result.stdout and "complete " in result.stdout
    assert "--install-completion" in run_cli("--help").stdout


@pytest.mark.parametrize("args,fragment", [
    (("plan", "--bogus"), "No such option: --bogus"),
    (("plan", "--model", "jamba"), "Missing option '--p-tp'"),
    (("plan", "--model", "jamba", "--p-tp", "x", "--d-tp", "1"), "Invalid value for '--p-tp'"),
    (("check", "--model", "jamba", "--semantics", "fast"), "Invalid value for '--semantics'"),
    (("plnn",), "No such command 'plnn'"),
])
def test_option_parsing_errors_are_one_red_line(args, fragment):
    result = run_cli(*args)
    assert_user_error(result, fragment)
    assert len(messages(result.stderr.strip())) == 1 and result.stderr.startswith("error: ")
    assert "--help" in result.stderr and "╭" not in result.stderr


@pytest.mark.parametrize("args,code", [
    (("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "4"), 0),
    (("check", "--model", "jamba", "--pairs", "1:2"), 0),
    (("check", "--model", "granite-4.0-h-tiny", "--pairs", "1:2", "--semantics", "vllm"), 1),   # wrong bytes
    (("models", "--format", "json"), 0),
    (("plan", "--help"), 141),   # no verdict to keep: as SIGPIPE would end it
])
def test_a_closed_pipe_keeps_the_commands_verdict(args, code):
    read, write = os.pipe()
    os.close(read)   # the reader is gone before the first byte, like `| head -0`
    proc = subprocess.run([*CLI, *args], stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "160"})
    os.close(write)
    assert proc.returncode == code, proc.stderr
    assert proc.stderr == ""


def test_a_stop_signal_python_wraps_is_still_the_signals_one_line():
    # SIGTERM landing while a dataclass is created: Python 3.11 re-raises the handler's exception
    # from __set_name__ as a RuntimeError caused by it. Seen in the signal tests under load.
    program = ("import dataclasses, signal\n"
               "import mambaxfer_cli.cli as cli\n"
               "class Landing:\n"
               "    def __set_name__(self, owner, name):\n"
               "        signal.raise_signal(signal.SIGTERM)\n"
               "def starts():\n"
               "    @dataclasses.dataclass\n"
               "    class Options:\n"
               "        field: object = Landing()\n"
               "cli.COMMANDS['starts'] = ('__main__:starts', 'Starts.', '0 ok')\n"
               "from mambaxfer_cli.__main__ import main\n"
               "main()\n")
    proc = subprocess.run([sys.executable, "-c", program, "starts"], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 128 + signal.SIGTERM and messages(proc.stderr.strip()) == ["stopped by SIGTERM"]


def test_an_internal_error_has_its_own_exit_code():
    # A command with a bug: the traceback is printed, and the exit code is neither a verdict nor 2.
    program = ("import mambaxfer_cli.cli as cli\n"
               "def crash():\n"
               "    raise RuntimeError('a bug')\n"
               "cli.COMMANDS['crash'] = ('__main__:crash', 'Crashes.', '0 ok')\n"
               "from mambaxfer_cli.__main__ import main\n"
               "main()\n")
    proc = subprocess.run([sys.executable, "-c", program, "crash"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 70
    assert "Traceback" in proc.stderr and "RuntimeError: a bug" in proc.stderr
    assert messages(proc.stderr.strip())[-1].startswith("error: internal error")


def words(text: str) -> set[str]:
    return set(re.findall(r"[^\s│┃|·:,;()\[\]]+", text))


@pytest.mark.parametrize("columns", ["80", "60"])
def test_narrow_terminals_keep_every_identifier_whole(columns):
    env = {"COLUMNS": columns}
    models = run_cli("models", env=env)
    assert models.code == 0 and "…" not in models.stdout
    specs = [load_model(name) for name in preset_names()]
    assert all({spec.name, spec.source} <= words(models.stdout) for spec in specs), models.stdout
    assert all(len(line) <= int(columns) for line in models.stdout.splitlines())

    check = run_cli("check", "--model", "granite-4.0-h-tiny", "--pairs", "1:2,2:1", env=env)
    assert check.code == 1 and "…" not in check.stdout
    assert "granite-4.0-h-tiny" in words(check.stdout), check.stdout
    assert "P TP 1 → D TP 2" in check.stdout and "P TP 2 → D TP 1" in check.stdout, check.stdout   # on one line

    args = ("plan", "--model", "granite-4.0-h-tiny", "--p-tp", "1", "--d-tp", "2")
    plan = run_cli(*args, "--show", "reads", env=env)
    document = json.loads(run_cli(*args, "--format", "json").stdout)
    offsets = {str(seg[key]) for read in document["reads"] for seg in read["segments"]
               for key in ("remote_offset", "local_offset", "size")}
    assert plan.code == 0 and offsets <= words(plan.stdout), offsets - words(plan.stdout)
    assert all(len(line) <= int(columns) for line in plan.stdout.splitlines())


def test_execute_refuses_a_bad_timeout_or_host_before_starting():
    base = ("execute", "--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--device", "cpu")
    for value in ("nan", "inf", "0", "-3"):
        assert_user_error(run_cli(*base, "--timeout", value), "--timeout")
    assert_user_error(run_cli(*base, "--host", "no-such-host.invalid"), "--host no-such-host.invalid: unknown host")
    assert_user_error(run_cli(*base, "--host", "192.0.2.1"), "not an address of this machine")
