"""The planning core and the CLI app import neither torch nor nixl (STYLE: a functional core)."""

from __future__ import annotations

import json
import subprocess
import sys

PLANNING = ["mambaxfer_cli.planning.model", "mambaxfer_cli.families", "mambaxfer_cli.readers.model_config",
            "mambaxfer_cli.readers.model_source", "mambaxfer_cli.planning.variants", "mambaxfer_cli.planning.layout",
            "mambaxfer_cli.planning.reads", "mambaxfer_cli.engines.vllm.kv_groups",
            "mambaxfer_cli.engines.vllm.descriptors",
            "mambaxfer_cli.engines.vllm.plan", "mambaxfer_cli.proof.pattern"]

PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
import typer
from mambaxfer_cli.cli import app
typer.main.get_command(app)   # every command's module and options, as they load when one runs
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "nixl", "nixl_cu12", "nixl_cu13"))))
"""


def test_planning_modules_and_cli_do_not_import_torch_or_nixl():
    # A fresh interpreter: this test process may already hold torch from other tests.
    proc = subprocess.run([sys.executable, "-c", PROBE, *PLANNING], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []



RUN_THEN_LIST = """
import json, sys
from mambaxfer_cli.__main__ import main
sys.argv = ["mambaxfer", *sys.argv[1:]]
try:
    main()
finally:
    print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def test_plan_as_json_imports_neither_numpy_nor_yaml_nor_rich():
    # What `plan --format json` starts in (docs: BENCHMARKS.md, start-up): the planning core is plain
    # Python, a preset is read from its compiled JSON, and no table is rendered.
    args = ["plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "4", "--format", "json"]
    proc = subprocess.run([sys.executable, "-c", RUN_THEN_LIST, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["schema"] == "mambaxfer.plan/v1"
    modules = set(json.loads(proc.stderr.strip().splitlines()[-1]))
    assert "mambaxfer_cli.engines.vllm.plan" in modules
    assert sorted(m for m in modules if m.split(".")[0] in ("numpy", "yaml", "rich")
                  or m in ("mambaxfer_cli.engines.vllm.views.plan", "mambaxfer_cli.engines.vllm.proof.addresses")) == []
