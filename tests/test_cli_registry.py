"""Commands are registered in one place and loaded when they run: listing them imports none."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

from cli_run import run_cli
from mambaxfer_cli.cli import COMMANDS

PROBE = """
import json, sys
from mambaxfer_cli.cli import flushed, run
code = flushed(run(sys.argv[1:]))
print(json.dumps(sorted(m for m in sys.modules if m.startswith("mambaxfer_cli.cli.") and m.endswith("_cmd")
                        or m.split(".")[0] in ("numpy", "yaml"))), file=sys.stderr)
"""


def _loaded(*args: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    return json.loads(proc.stderr.strip().splitlines()[-1])


def _first_paragraph(text: str) -> str:
    return " ".join(inspect.cleandoc(text).split("\n\n")[0].split())


def test_each_summary_is_its_commands_docstring():
    for name, command in COMMANDS.items():
        module, function = command.target.split(":")
        target = getattr(__import__(module, fromlist=[function]), function)
        assert _first_paragraph(target.__doc__) == command.summary, name


def test_help_lists_every_command_and_loads_none():
    text = run_cli("--help", env={"COLUMNS": "200"}).stdout
    for name in COMMANDS:
        assert f" {name} " in text
    assert _loaded("--help") == []
    assert _loaded("plna") == []      # a mistyped command loads nothing either


def test_a_command_loads_its_own_module_alone():
    loaded = _loaded("schema", "models")
    assert [m for m in loaded if m.endswith("_cmd")] == ["mambaxfer_cli.cli.schema_cmd"]
    assert "numpy" not in loaded
