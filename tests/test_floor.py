"""The command line on the oldest typer and rich pyproject.toml allows: installed into a throwaway
folder put first on the path, every command's --help, a plan, a tri-state flag and a usage error
behave as with the releases installed here (an earlier floor, typer>=0.12, broke every command on
a typer release that lacked a method the CLI patched; it patches none now)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cli_run import run_cli

ROOT = Path(__file__).resolve().parent.parent


def _floor(name: str) -> str:
    """The lowest version of ``name`` pyproject.toml's dependencies allow."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    found = [re.fullmatch(rf"{name}>=([\d.]+)", d) for d in dependencies]
    versions = [m.group(1) for m in found if m]
    assert versions, f"pyproject.toml names no floor for {name}"
    return versions[0]


@pytest.fixture(scope="module")
def floor_path(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("floor")
    wanted = [f"typer=={_floor('typer')}", f"rich=={_floor('rich')}"]
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(folder),
                           *wanted, "pygments", "markdown-it-py", "mdurl", "shellingham", "annotated-doc"],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.skip(f"cannot install {', '.join(wanted)} here: {proc.stderr.strip()[-300:]}")
    return str(folder)


def _run(floor: str, *args: str):
    return run_cli(*args, env={"PYTHONPATH": f"{floor}:{ROOT}"})


def test_the_floor_is_what_runs(floor_path):
    probe = subprocess.run([sys.executable, "-c", "import typer, rich; print(typer.__file__, rich.__file__)"],
                           capture_output=True, text=True, env={"PYTHONPATH": floor_path}, check=True)
    assert probe.stdout.count(floor_path) == 2


@pytest.mark.parametrize("command", ["", "plan", "check", "preflight", "inspect", "models", "execute", "bench",
                                     "conformance", "schema"])
def test_help_on_the_floor(floor_path, command):
    args = (command, "--help") if command else ("--help",)
    floor, here = _run(floor_path, *args), run_cli(*args)
    assert floor.code == 0 and floor.stderr == "", floor.stderr
    assert "Usage: mambaxfer" in floor.stdout
    names = lambda text: sorted(set(re.findall(r"--[a-z][a-z0-9-]+", text)))  # noqa: E731
    assert names(floor.stdout) == names(here.stdout)


def test_a_plan_on_the_floor_is_the_same(floor_path):
    args = ("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "4", "--p-no-enable-prefix-caching",
            "--format", "json")
    floor, here = _run(floor_path, *args), run_cli(*args)
    assert floor.code == here.code == 0, floor.stderr
    assert floor.stdout == here.stdout
    assert '"prefix_caching": false' in floor.stdout and '"prefix_caching": true' in floor.stdout


@pytest.mark.parametrize("args,fragment", [
    (("plan", "--model", "jamba"), "Missing option '--p-tp'"),
    (("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--format", "xml"), "Invalid value for '--format'"),
])
def test_usage_errors_on_the_floor(floor_path, args, fragment):
    floor, here = _run(floor_path, *args), run_cli(*args)
    assert floor.code == here.code == 2
    assert fragment in floor.stderr and floor.stderr == here.stderr
