"""Run the real ``mambaxfer`` CLI in a subprocess, as a user would."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from dataclasses import dataclass


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


# A guard against a hang, not a measure of speed: a shared CI machine may take minutes where a quiet
# one takes seconds (`check --all-presets` took 95-106 s beside five other jobs on two cores).
HANG_GUARD = 900


def run_cli(*args: str, timeout: float = HANG_GUARD, env: dict | None = None, cwd: str | None = None,
            preexec=None, stdin: str | None = None) -> CliResult:
    full_env = {**os.environ, "COLUMNS": "160", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "mambaxfer_cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=cwd, preexec_fn=preexec, input=stdin)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def charted(path) -> tuple[str, ...]:
    """``--chart PATH`` where matplotlib is installed; bench refuses it before the run without."""
    return ("--chart", str(path)) if importlib.util.find_spec("matplotlib") else ()


def assert_user_error(result: CliResult, *fragments: str) -> None:
    """Exit code 2, one line on stderr naming the problem, no traceback."""
    assert result.code == 2, (result.code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    words = " ".join(result.stderr.split())     # the message wraps between words at the width
    for fragment in fragments:
        assert fragment in result.stderr or " ".join(fragment.split()) in words, (fragment, result.stderr)


def assert_refused(result: CliResult, *fragments: str) -> None:
    """Exit code 1 (the engine would not run it: a verdict, not a misreading), one line on stderr
    in the engine's words, no traceback."""
    assert result.code == 1, (result.code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in messages(result.stderr) if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert " ".join(fragment.split()) in lines[0], (fragment, result.stderr)


def messages(stderr: str) -> list[str]:
    """stderr's messages, one per item: an error wraps between words at the output's width, so the
    lines after an ``error:`` line are joined to it."""
    out: list[str] = []
    joining = False
    for line in stderr.splitlines():
        if joining and line.strip() and not line.startswith(("error: ", "warning: ", "Traceback")):
            out[-1] = f"{out[-1]} {line.strip()}"
            continue
        out.append(line)
        joining = line.startswith("error: ")
    return out


def assert_run_failed(result: CliResult, *fragments: str) -> None:
    """Exit code 3 (a run that could not complete), one line on stderr, nothing on stdout."""
    assert result.code == 3, (result.code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = [line for line in messages(result.stderr) if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, result.stderr)


def run_json(*args: str, env: dict | None = None, timeout: float = HANG_GUARD) -> tuple[int, dict]:
    """A run that ends with its verdict (exit 0 or 1), no traceback, and its JSON document."""
    import json

    result = run_cli(*args, env=env, timeout=timeout)
    assert result.code in (0, 1), result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result.code, json.loads(result.stdout)


def commands() -> dict:
    """The command line's commands by name, in the order ``mambaxfer --help`` lists them: the
    commands typer builds from the app (their ``params``, ``help``, ``epilog``)."""
    import typer

    from mambaxfer_cli.cli import app

    return dict(typer.main.get_command(app).commands)


def vllm_presets() -> list[str]:
    """The presets whose state vLLM's NIXL connector moves (not LFM2's short conv, which it refuses,
    nor GigaChat3.5, which no vLLM release serves)."""
    from mambaxfer_cli.engines.vllm.startup import connector_refusal, served_anywhere
    from mambaxfer_cli.readers.model_source import preset_file, preset_names

    archs = {name: preset_file(name)["config"]["architectures"] for name in preset_names()}
    return [name for name, a in archs.items() if not connector_refusal(a) and served_anywhere(a)]
