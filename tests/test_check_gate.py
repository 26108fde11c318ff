"""examples/ci/check-gate.sh: the exit codes a CI job relies on, and a log that holds the reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GATE = Path(__file__).parent.parent / "examples" / "ci" / "check-gate.sh"


def gate(tmp_path, *args):
    env = {**os.environ, "MAMBAXFER": f"{sys.executable} -m mambaxfer_cli",
           "MAMBAXFER_CHECK_OUT": str(tmp_path / "out"),
           "PYTHONPATH": os.pathsep.join([str(GATE.parents[2]), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(["bash", str(GATE), *args], capture_output=True, text=True, env=env, timeout=120)


def test_a_verified_topology_passes_with_its_junit(tmp_path):
    result = gate(tmp_path, "jamba", "1:2")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "junit.xml").is_file()


def test_a_usage_error_leaves_no_old_junit_and_keeps_its_reason_in_the_log(tmp_path):
    assert gate(tmp_path, "jamba", "1:2").returncode == 0
    result = gate(tmp_path, "no-such-model", "1:2")
    assert result.returncode == 2
    assert not (tmp_path / "out" / "junit.xml").exists()      # the last run's verdict is not reused
    assert "unknown model 'no-such-model'" in (tmp_path / "out" / "check.log").read_text()


def test_bad_arguments_to_the_script_exit_2(tmp_path):
    for args in (("jamba",), ("jamba", "1:2", "fast"), ("jamba", "1:2", "vllm", "extra")):
        result = gate(tmp_path, *args)
        assert result.returncode == 2 and "usage: check-gate.sh" in result.stderr, args
