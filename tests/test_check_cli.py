"""``mambaxfer check`` end to end: verdicts, exit codes, JSON, JUnit, the CI examples, user errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
import yaml

from cli_run import assert_refused, assert_user_error, messages, run_cli
from mambaxfer_cli.schema import document_schema

ROOT = Path(__file__).resolve().parents[1]


def test_vllm_granite_p_tp1_d_tp2_fails_and_explains_the_corruption():
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


def vllm_wrong_bytes(model: str, pairs: str) -> list[int]:
    """The wrong bytes of vLLM's own reads, from --semantics vllm's document."""
    doc = json.loads(run_cli("check", "--model", model, "--pairs", pairs, "--semantics", "vllm",
                             "--format", "json").stdout)
    return [r["wrong_bytes"] for r in doc["results"]]


def test_by_default_granite_p_tp1_d_tp2_fails_in_one_line_saying_vllm_corrupts_the_bc_groups():
    # The deployment question: mambaxfer's plan is right, but vLLM 0.33's reads of Granite's one
    # replicated B/C group corrupt it (its offsets assume the group is sharded; docs/reference.md).
    result = run_cli("check", "--model", "granite-4.0-h-tiny", "--pairs", "1:2", "--vllm-version", "0.33")
    assert result.code == 1, result.stdout + result.stderr
    [wrong] = vllm_wrong_bytes("granite-4.0-h-tiny", "1:2")
    assert wrong > 0
    lines = [line for line in result.stdout.splitlines() if line.startswith("✗ ")]
    assert lines == [f"✗ granite-4.0-h-tiny P TP 1 → D TP 2: vLLM 0.33 corrupts the B/C groups: {wrong} bytes wrong; "
                     f"fix: the same TP on both sides"]
    assert "✓ right" in result.stdout and "✗ corrupts" in result.stdout
    assert "0 passed, 1 FAILED" in result.stdout


def test_by_default_a_refused_pairing_fails_with_its_fix_and_equal_tp_passes():
    result = run_cli("check", "--model", "qwen3.5-0.8b", "--pairs", "1:4", "--vllm-version", "0.33")
    assert result.code == 1
    assert ("✗ qwen3.5-0.8b P TP 1 → D TP 4: vLLM 0.33 refuses it (Local block size 320 is not divisible by remote "
            "block size 576 or vice versa); --block-size 144 on both engines makes vLLM accept it") \
        in " ".join(result.stdout.split())
    assert "1 REFUSED by vLLM 0.33" in result.stdout
    fixed = run_cli("check", "--model", "qwen3.5-0.8b", "--pairs", "1:4", "--block-size", "144")
    assert fixed.code == 0, fixed.stdout
    same = run_cli("check", "--model", "granite-4.0-h-tiny", "--pairs", "2:2", "--format", "json")
    assert same.code == 0
    [result] = json.loads(same.stdout)["results"]
    assert result["deployment"]["vllm"] == "right-bytes" and result["verdict"] == "pass"


def test_default_document_and_junit_answer_the_deployment_question(tmp_path):
    junit = tmp_path / "report.xml"
    result = run_cli("check", "--model", "granite-4.0-h-tiny", "--pairs", "1:1,1:2,1:12", "--format", "json",
                     "--junit", str(junit))
    assert result.code == 1
    doc = json.loads(result.stdout)
    jsonschema.Draft202012Validator(document_schema("check")).validate(doc)
    assert doc["semantics"] == "both" and doc["ok"] is False
    assert doc["summary"] | {"seconds": 0} == {"pairings": 3, "passed": 1, "failed": 1, "refused": 1,
                                                 "skipped": 0, "seconds": 0}
    same, split, refused = doc["results"]
    assert [r["verdict"] for r in doc["results"]] == ["pass", "fail", "refused"]
    assert same["deployment"]["vllm"] == "right-bytes" and same["deployment"]["vllm_wrong_bytes"] == 0
    # the exact plan's proof stays at the top; vLLM's own is nested, as --semantics vllm gives it
    assert split["wrong_bytes"] == 0 and split["deployment"]["mambaxfer"] == "pass"
    assert split["deployment"]["vllm"] == "corrupts" and split["deployment"]["vllm_corrupts"] == ["B", "C"]
    assert split["deployment"]["vllm_wrong_bytes"] == split["deployment"]["vllm_check"]["wrong_bytes"] \
        == vllm_wrong_bytes("granite-4.0-h-tiny", "1:2")[0]
    assert split["explanation"][0] == split["deployment"]["summary"]
    assert refused["deployment"]["vllm"] == "refuses" and refused["deployment"]["fix_block_size"] == 400
    assert "corrupt the B/C groups" in refused["deployment"]["summary"]   # and after the fix, still wrong
    cases = ET.parse(junit).getroot().findall("testsuite/testcase")
    assert [c.get("name") for c in cases] == ["P TP 1 → D TP 1 both", "P TP 1 → D TP 2 both", "P TP 1 → D TP 12 both"]
    assert cases[0].find("failure") is None and "moves the right bytes" in cases[0].find("system-out").text
    assert cases[1].find("failure").get("message") == split["deployment"]["summary"]
    assert "first wrong byte: D0" in cases[1].find("failure").text     # vLLM's, for the CI log


def test_max_tp_says_which_tp_sizes_and_pairings_it_left_out():
    # toy-mamba2: 4 B/C groups, so TP 1, 2 and 4 only
    result = run_cli("check", "--model", str(ROOT / "examples/models/toy-mamba2.yaml"), "--max-tp", "8")
    # toy-mamba2 has no attention layers: vLLM refuses every pairing at handshake (_build_fa_remote and
    # _build_local_splits_from_plan look up an attention group with next()), mambaxfer's plans pass
    assert result.code == 1, result.stdout
    assert "9 pairings checked byte by byte" in result.stdout and "9 REFUSED by vLLM 0.34" in result.stdout
    assert ("– toy-mamba2: not checked up to TP 8: TP 3, 5, 6, 7 do not divide intermediate_size = 256 "
            "(mamba2 'x' channels); TP 8 does not divide n_groups = 4") in " ".join(result.stdout.split())
    mixed = run_cli("check", "--model", "mamba-130m", "--max-tp", "3", "--format", "json")
    assert json.loads(mixed.stdout)["unchecked"] == [
        "mamba-130m: not checked, 2 pairings of TP sizes where neither divides the other (vLLM refuses "
        "them; --semantics exact proves mambaxfer's plans of them)"]
    exact = run_cli("check", "--model", "mamba-130m", "--max-tp", "3", "--semantics", "exact", "--format", "json")
    assert json.loads(exact.stdout)["unchecked"] == [] and json.loads(exact.stdout)["summary"]["pairings"] == 9


def test_exact_granite_p_tp1_d_tp2_passes():
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
    assert [c.get("name") for c in cases] == ["P TP 1 → D TP 1 vllm", "P TP 1 → D TP 2 vllm", "P TP 2 → D TP 1 vllm"]
    assert cases[0].find("failure") is None
    failure = cases[1].find("failure")
    assert failure.get("message").startswith("first wrong byte: D0")
    assert "D1 B: C read as B" in failure.text
    assert [p.name for p in tmp_path.iterdir()] == ["report.xml"]     # written atomically: no temp left


def test_yaml_format_and_a_model_file_with_max_tp():
    result = run_cli("check", "--model", str(ROOT / "examples/models/toy-mamba2.yaml"), "--max-tp", "3",
                     "--format", "yaml")
    assert result.code == 1, result.stderr       # no attention layers: vLLM refuses every pairing
    doc = yaml.safe_load(result.stdout)
    assert doc["ok"] is False and doc["summary"]["failed"] == 0
    assert doc["summary"]["pairings"] == doc["summary"]["refused"] == len(doc["results"]) >= 4
    assert {r["deployment"]["vllm"] for r in doc["results"]} == {"refuses"}
    assert {r["vllm"]["refusals"][-1]["code"] for r in doc["results"]} == {"no-attention"}
    exact = yaml.safe_load(run_cli("check", "--model", str(ROOT / "examples/models/toy-mamba2.yaml"),
                                   "--max-tp", "3", "--format", "yaml", "--semantics", "exact").stdout)
    assert exact["ok"] is True and exact["summary"]["passed"] == exact["summary"]["pairings"] >= 4


def test_all_presets_pass_in_exact_semantics_with_the_table():
    result = run_cli("check", "--all-presets", "--max-tp", "2", "--coalesce", "--semantics", "exact")
    assert result.code == 0, result.stdout[-2000:] + result.stderr
    for name in ("glm-5-next", "granite-4.0-h-tiny", "jamba", "kimi-linear-48b", "mamba-130m", "mamba-codestral-7b",
                 "nemotron-h-8b", "qwen3-next-80b", "qwen3.5-0.8b", "qwen3.8-flash-next"):
        assert name in result.stdout
    assert "40 pairings checked byte by byte" in result.stdout and "40 passed" in result.stdout
    assert "P TP 2 → D TP 1 coalesced" in result.stdout


def test_non_multiples_under_exact_semantics():
    result = run_cli("check", "--model", "mamba-130m", "--pairs", "2:3,3:2,4:6", "--semantics", "exact",
                     "--format", "json")
    assert result.code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [r["tp_ratio"] for r in doc["results"]] == [None, None, None]
    assert all(r["verdict"] == "pass" and r["bytes"] > 0 for r in doc["results"])


@pytest.mark.parametrize("args,fragments", [
    (["--model", "jamba", "--pairs", "1:3"], ["--pairs 1:3: vLLM does not start a TP-3 engine of jamba",
                                              "32 attention heads", "verify_with_parallel_config",
                                              "TP sizes that work"]),
    (["--model", "granite-4.0-h-tiny", "--pairs", "1:8"], ["12 attention heads do not divide by TP 8"]),
    (["--model", "granite-4.0-h-tiny", "--pairs", "1:3"], ["--pairs 1:3", "4 KV heads"]),
    (["--model", "mamba-130m", "--pairs", "2:3", "--semantics", "vllm"],
     ["vLLM needs one TP size to divide the other"]),
])
def test_a_listed_pairing_vllm_does_not_start_is_its_refusal_and_exit_1(args, fragments):
    assert_refused(run_cli("check", *args), *fragments)


@pytest.mark.parametrize("args,fragments", [
    (["--model", "granit", "--pairs", "1:2"], ["unknown model 'granit'", "did you mean"]),
    (["--model", "jamba", "--pairs", "1-2"], ["--pairs: '1-2' is not a P:D pair"]),
    (["--model", "jamba", "--pairs", ""], ["--pairs: give at least one P:D pair"]),
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
    assert len(messages(result.stderr.strip())) == 1
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
    good = run_gate(tmp_path, "granite-4.0-h-tiny", "1:2,2:1", "exact")
    assert good.returncode == 0, good.stderr
    assert "verified byte by byte" in good.stdout
    assert ET.parse(tmp_path / "out/junit.xml").getroot().get("failures") == "0"

    default = run_gate(tmp_path, "granite-4.0-h-tiny", "1:2,2:1")     # what vLLM does: corrupts
    assert default.returncode == 1 and "would be refused or corrupt state" in default.stderr
    assert default.stdout.count("corrupts the B/C groups") == 2
    assert ET.parse(tmp_path / "out/junit.xml").getroot().get("failures") == "2"

    bad = run_gate(tmp_path, "granite-4.0-h-tiny", "1:2", "vllm")
    assert bad.returncode == 1
    assert "C read as B" in bad.stdout and "would be refused or corrupt state" in bad.stderr
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
        assert "semantics" not in entry      # the default: what vLLM does, proved
        result = run_cli("check", "--model", entry["model"], "--pairs", entry["pairs"], "--format", "json")
        assert result.code == 0, (entry, result.stdout[-1500:])


def test_a_presets_repo_id_works_in_plan_and_check_as_in_preflight(tmp_path):
    env = {"HF_HUB_CACHE": str(tmp_path)}       # not in the cache: the preset whose source it is
    plan = run_cli("plan", "--model", "Qwen/Qwen3.5-0.8B", "--p-tp", "1", "--d-tp", "2", "--format", "json", env=env)
    assert plan.code == 0, plan.stderr
    assert json.loads(plan.stdout)["model"]["name"] == "qwen3.5-0.8b"
    check = run_cli("check", "--model", "Qwen/Qwen3.5-0.8B", "--pairs", "1:2", env=env)
    assert check.code == 0, check.stdout + check.stderr
    typo = run_cli("check", "--model", "qwen3.5", "--pairs", "1:2")
    assert_user_error(typo, "unknown model 'qwen3.5'; did you mean 'qwen3.5-0.8b'?")
