"""Commands are plain functions registered on the typer app in one place; a command module imports
only light things at its top, so listing the commands loads nothing a command runs on."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

from cli_run import commands, run_cli
from mambaxfer_cli.cli import app

PROBE = """
import json, sys
from mambaxfer_cli.cli import flushed, run
code = flushed(run(sys.argv[1:]))
print(json.dumps(sorted(m for m in sys.modules if m.startswith("mambaxfer_cli.")
                        or m.split(".")[0] in ("numpy", "yaml", "torch", "nixl"))), file=sys.stderr)
"""
ORDER = ["plan", "check", "preflight", "inspect", "models", "execute", "bench", "conformance", "schema"]
# What the commands run on, imported in their bodies: none of it is loaded to list them.
RUN_ON = ("numpy", "yaml", "torch", "nixl", "mambaxfer_cli.execute", "mambaxfer_cli.conformance",
          "mambaxfer_cli.preflight", "mambaxfer_cli.proof.", "mambaxfer_cli.readers", "mambaxfer_cli.engines.vllm.plan")


def _loaded(*args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    return json.loads(proc.stderr.strip().splitlines()[-1])


def _first_paragraph(text: str) -> str:
    return " ".join(inspect.cleandoc(text).split("\n\n")[0].split())


def _run_on(loaded: list[str]) -> list[str]:
    return [m for m in loaded if m.startswith(RUN_ON) or (m.startswith("mambaxfer_cli.render.") and "_view" in m)]


def test_the_list_is_the_registrys_order_with_each_docstrings_summary():
    assert list(commands()) == ORDER
    text = " ".join(run_cli("--help", env={"COLUMNS": "200"}).stdout.replace("│", " ").split())
    for info in app.registered_commands:
        name = info.callback.__name__
        assert f" {name} {_first_paragraph(info.callback.function.__doc__)} " in text, name


def test_help_lists_every_command_and_loads_nothing_they_run_on():
    text = run_cli("--help", env={"COLUMNS": "200"}).stdout
    for name in ORDER:
        assert f" {name} " in text
    assert _run_on(_loaded("--help")) == []
    assert _run_on(_loaded("plna")) == []      # a mistyped command loads nothing either


def test_a_command_loads_what_it_runs_on_alone():
    loaded = _loaded("schema", "models")
    assert _run_on(loaded) == []
    assert "mambaxfer_cli.schema" in loaded and "numpy" not in loaded
