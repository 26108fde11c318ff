"""``mambaxfer check`` end to end: verdicts, exit codes, JSON, JUnit, the CI examples, user errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from cli_run import assert_user_error, run_cli

ROOT = Path(__file__).resolve().parents[1]


def test_vllm_granite_1p2d_fails_and_explains_the_corruption():
    result = run_cli("check", "--model", "granite-4.0-h-tiny", "--pairs", "1:2", "--semantics", "vllm")
    assert result.code == 1, result.stderr
    out = result.stdout
    assert "✗ FAIL" in out and "1 pairing checked byte by byte" in out and "1 FAILED" in out
    assert "first wrong byte: D0 tensor 0 SSM block" in out and "= C channel 0 byte 0" in out
    assert "which holds ssm head 0 byte 0" in out
    assert "D1 B: C read as B" in out
    assert "D0 C: temporal bytes read as C" in out and "D1 C: temporal bytes read as C" in out
    assert "D1 B[0:128] <- P0 C[0:128]" in out
    assert "Traceback" not in result.stderr


def test_exact_granite_1p2d_passes():
    result = run_cli("check", "--model", "granite-4.0-h-tiny", "--pairs", "1:2", "--semantics", "exact")
    assert result.code == 0, result.stdout + result.stderr
    assert "✓ pass" in result.stdout and "1 pairing checked byte by byte" in result.stdout
    assert "1 passed" in result.stdout and "FAIL" not in result.stdout


def test_json_document_and_junit_report(tmp_path):
    junit = tmp_path / "report.xml"
    result = run_cli("check", "--model", "granite-4.0-h-tiny", "--pairs", "1:1,1:2,2:1", "--semantics", "vllm",
                     "--format", "json", "--junit", str(junit))
    assert result.code == 1
    doc = json.loads(result.stdout)
    assert doc["schema"] == "mambaxfer.check/v1" and doc["ok"] is False and doc["semantics"] == "vllm"
    assert [(r["p_tp"], r["d_tp"], r["verdict"]) for r in doc["results"]] == [
        (1, 1, "pass"), (1, 2, "fail"), (2, 1, "fail")]
    bad = doc["results"][1]
    assert bad["first_wrong_byte"]["source"]["holds"] == "ssm head 0 byte 0"
    assert {(d["d_rank"], d["region"], d["first"]["reason"]) for d in bad["damage"]} == {
        (0, "C", "temporal bytes read as C"), (1, "B", "C read as B"), (1, "C", "temporal bytes read as C")}

    root = ET.parse(junit).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("3", "2", "0")
    cases = root.findall("testsuite/testcase")
    assert [c.get("name") for c in cases] == ["P1-D1 vllm", "P1-D2 vllm", "P2-D1 vllm"]
    assert cases[0].find("failure") is None
    failure = cases[1].find("failure")
    assert failure.get("message").startswith("first wrong byte: D0")
    assert "D1 B: C read as B" in failure.text
    assert [p.name for p in tmp_path.iterdir()] == ["report.xml"]     # written atomically: no temp left


def test_yaml_format_and_a_model_file_with_max_tp():
    result = run_cli("check", "--model", str(ROOT / "examples/models/toy-mamba2.yaml"), "--max-tp", "3",
                     "--format", "yaml")
    assert result.code == 0, result.stderr
    doc = yaml.safe_load(result.stdout)
    assert doc["ok"] is True and doc["summary"]["failed"] == 0
    assert doc["summary"]["pairings"] == len(doc["results"]) >= 4


def test_all_presets_pass_in_exact_semantics_with_the_table():
    result = run_cli("check", "--all-presets", "--max-tp", "2", "--coalesce")
    assert result.code == 0, result.stdout[-2000:] + result.stderr
    for name in ("granite-4.0-h-tiny", "jamba", "mamba-130m", "mamba-codestral-7b", "nemotron-h-8b",
                 "qwen3-next-80b", "qwen3.5-0.8b"):
        assert name in result.stdout
    assert "28 pairings checked byte by byte" in result.stdout and "28 passed" in result.stdout
    assert "P2 → D1 coalesced" in result.stdout


def test_non_multiples_under_exact_semantics():
    result = run_cli("check", "--model", "mamba-130m", "--pairs", "2:3,3:2,4:6", "--format", "json")
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [r["tp_ratio"] for r in doc["results"]] == [None, None, None]
    assert all(r["verdict"] == "pass" and r["bytes"] > 0 for r in doc["results"])


@pytest.mark.parametrize("args,fragments", [
    (["--model", "granit", "--pairs", "1:2"], ["unknown model 'granit'", "did you mean"]),
    (["--model", "jamba", "--pairs", "1-2"], ["--pairs: '1-2' is not a P:D pair"]),
    (["--model", "jamba", "--pairs", ""], ["--pairs: give at least one P:D pair"]),
    (["--model", "jamba", "--pairs", "1:3"], ["--pairs 1:3: jamba: TP 3 does not divide", "TP sizes that work"]),
    (["--model", "granite-4.0-h-tiny", "--pairs", "1:3"], ["--pairs 1:3", "4 KV heads"]),
    (["--model", "mamba-130m", "--pairs", "2:3", "--semantics", "vllm"],
     ["vLLM needs one TP size to divide the other"]),
    (["--model", "jamba", "--max-tp", "0"], ["--max-tp must be >= 1, got 0"]),
    (["--model", "jamba", "--pairs", "1:2", "--max-tp", "4"], ["either --pairs or --max-tp"]),
    (["--pairs", "1:2"], ["give --model M or --all-presets"]),
    (["--model", "jamba", "--all-presets"], ["give --model M or --all-presets"]),
    (["--model", "jamba", "--pairs", "1:2", "--request-blocks", "0"], ["--request-blocks must be >= 1"]),
    (["--model", "jamba", "--pairs", "1:2", "--junit", "/nonexistent-dir/x.xml"],
     ["--junit /nonexistent-dir/x.xml: directory /nonexistent-dir does not exist"]),
])
def test_user_errors_are_one_line_and_exit_2(args, fragments):
    result = run_cli("check", *args)
    assert_user_error(result, *fragments)
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_junit_pointing_at_a_directory_is_a_user_error(tmp_path):
    assert_user_error(run_cli("check", "--model", "jamba", "--pairs", "1:2", "--junit", str(tmp_path)),
                      f"--junit {tmp_path}: is a directory")


def test_bad_semantics_value_is_a_usage_error():
    result = run_cli("check", "--model", "jamba", "--semantics", "fast")
    assert result.code == 2 and "Traceback" not in result.stderr


# --- the CI examples ----------------------------------------------------------------------------

def run_gate(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MAMBAXFER": f"{sys.executable} -m mambaxfer_cli",
           "MAMBAXFER_CHECK_OUT": str(tmp_path / "out"), "COLUMNS": "160"}
    return subprocess.run(["bash", str(ROOT / "examples/ci/check-gate.sh"), *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_gate_script_passes_fails_and_reports_usage_errors(tmp_path):
    good = run_gate(tmp_path, "granite-4.0-h-tiny", "1:2,2:1")
    assert good.returncode == 0, good.stderr
    assert "verified byte by byte" in good.stdout
    assert ET.parse(tmp_path / "out/junit.xml").getroot().get("failures") == "0"

    bad = run_gate(tmp_path, "granite-4.0-h-tiny", "1:2", "vllm")
    assert bad.returncode == 1
    assert "C read as B" in bad.stdout and "would corrupt state" in bad.stderr
    assert "C read as B" in (tmp_path / "out/check.log").read_text()
    assert ET.parse(tmp_path / "out/junit.xml").getroot().get("failures") == "1"

    usage = run_gate(tmp_path, "no-such-model", "1:2")
    assert usage.returncode == 2 and "refused the arguments" in usage.stderr

    missing = run_gate(tmp_path)
    assert missing.returncode != 0 and "usage:" in missing.stderr


def test_github_workflow_runs_check_as_a_gate():
    workflow = yaml.safe_load((ROOT / "examples/ci/github-actions-check.yml").read_text())
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    commands = [step["run"] for step in steps if "run" in step]
    assert any("mambaxfer check" in c and "--junit" in c for c in commands)
    assert any("--all-presets" in c for c in commands)
    for entry in workflow["jobs"]["mambaxfer-check"]["strategy"]["matrix"]["include"]:
        # every pairing the example gates on passes, as the workflow promises
        result = run_cli("check", "--model", entry["model"], "--pairs", entry["pairs"],
                         "--semantics", entry["semantics"], "--format", "json")
        assert result.code == 0, (entry, result.stdout[-1500:])
