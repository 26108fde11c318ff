"""``--output`` and ``--junit``: a regular file replaced whole, a symlink followed, a device written
through (never turned into a file), a full disk one line that keeps check's verdict, the umask."""

from __future__ import annotations

import json
import os
import stat

import pytest

from cli_run import assert_user_error, run_cli

PLAN = ("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2")


def device(tmp_path, name: str, minor: int):
    """A character device like /dev/null (1, 3) or /dev/full (1, 7), made under tmp_path."""
    path = tmp_path / name
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    return path


def test_a_device_node_is_written_through_and_stays_a_device(tmp_path):
    null = device(tmp_path, "null", 3)
    result = run_cli(*PLAN, "--output", str(null))
    assert result.code == 0, result.stderr
    assert stat.S_ISCHR(null.stat().st_mode)
    assert os.listdir(tmp_path) == ["null"]   # no temp file left beside it


def test_a_full_disk_is_one_line_and_plan_exits_2(tmp_path):
    full = device(tmp_path, "full", 7)
    assert_user_error(run_cli(*PLAN, "--output", str(full)), f"--output {full}: cannot write: No space left")
    assert stat.S_ISCHR(full.stat().st_mode)


@pytest.mark.parametrize("model,semantics,code", [
    ("jamba", "exact", 2),                # verified, but the JUnit file is missing: a usage error
    ("granite-4.0-h-tiny", "vllm", 1),    # wrong bytes stay wrong bytes
])
def test_a_full_disk_under_junit_keeps_checks_verdict(tmp_path, model, semantics, code):
    full = device(tmp_path, "full", 7)
    result = run_cli("check", "--model", model, "--pairs", "1:2", "--semantics", semantics, "--junit", str(full))
    assert result.code == code, result.stderr
    assert "1 pairing checked byte by byte" in result.stdout           # the verdict is shown
    assert result.stderr.strip().endswith(f"--junit {full}: cannot write: No space left on device")
    assert "Traceback" not in result.stderr


def test_a_symlink_is_followed_not_replaced(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real.name)
    assert run_cli(*PLAN, "--output", str(link)).code == 0
    assert link.is_symlink() and real.read_text().startswith("{")
    assert stat.S_IMODE(real.stat().st_mode) == 0o640   # a replaced file keeps its mode


def test_a_new_file_gets_the_umask(tmp_path):
    for mask, mode in ((0o022, 0o644), (0o077, 0o600)):
        target = tmp_path / f"plan-{mask:o}.json"
        result = run_cli(*PLAN, "--output", str(target), preexec=lambda mask=mask: os.umask(mask))
        assert result.code == 0, result.stderr
        assert stat.S_IMODE(target.stat().st_mode) == mode


def test_names_too_long_for_the_file_system_are_one_line(tmp_path):
    long = tmp_path / ("x" * 300 + ".json")
    assert_user_error(run_cli(*PLAN, "--output", str(long)), "--output", "File name too long")
    assert_user_error(run_cli("check", "--model", "jamba", "--pairs", "1:2", "--junit", str(long)),
                      "--junit", "File name too long")
    assert_user_error(run_cli("inspect", "--model", str(long)), "File name too long")


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_output_dash_prints_the_document_as_format_does_and_writes_no_file(tmp_path, fmt):
    dashed = run_cli(*PLAN, "--format", fmt, "--output", "-", cwd=str(tmp_path))
    printed = run_cli(*PLAN, "--format", fmt, cwd=str(tmp_path))
    assert dashed.code == printed.code == 0, dashed.stderr
    assert (dashed.stdout, dashed.stderr) == (printed.stdout, printed.stderr)
    assert os.listdir(tmp_path) == []
    if fmt == "json":   # the default format's '-o -' is the JSON document, as for a file
        assert run_cli(*PLAN, "-o", "-", cwd=str(tmp_path)).stdout == printed.stdout


@pytest.mark.parametrize("args", [
    ("check", "--model", "jamba", "--pairs", "1:2", "--junit", "-"),
    ("check", "--engine", "sglang", "--model", "jamba", "--pairs", "1:2", "--junit", "-"),
    ("conformance", "--model", "jamba", "--max-tp", "2", "--junit", "-"),
    ("preflight", "--junit", "-"),
    ("bench", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--chart", "-"),
])
def test_dash_is_refused_where_stdout_carries_the_report(tmp_path, args):
    result = run_cli(*args, cwd=str(tmp_path))
    assert_user_error(result, f"'{args[-2]}': '-' is standard output, which carries the report; name a file")
    assert result.stdout == "" and os.listdir(tmp_path) == []


def test_a_file_named_dash_spelt_as_a_path_is_that_file(tmp_path):
    """'-' alone is standard output; './-' is a file named '-', for --output as for --junit."""
    result = run_cli(*PLAN, "--output", "./-", cwd=str(tmp_path))
    assert result.code == 0 and result.stdout == "", result.stderr
    assert json.loads((tmp_path / "-").read_text())["schema"] == "mambaxfer.plan/v1"
    (tmp_path / "-").unlink()
    junit = run_cli("check", "--model", "jamba", "--pairs", "1:2", "--junit", "./-", cwd=str(tmp_path))
    assert junit.code == 0 and (tmp_path / "-").read_text().startswith("<?xml"), junit.stderr


def test_a_plan_or_a_launch_script_is_read_from_standard_input_as_dash(tmp_path):
    """``execute --plan -`` and ``preflight --prefill-file -`` read standard input; both sides
    cannot, and an empty input is one line."""
    plan = run_cli(*PLAN, "--output", "-")
    assert plan.code == 0, plan.stderr
    # The plan is read and rebuilt: what stops it is its engines' memory, not the reading.
    assert_user_error(run_cli("execute", "--plan", "-", "--device", "cpu", stdin=plan.stdout),
                      "this plan cannot be executed: its engines need")
    assert_user_error(run_cli("execute", "--plan", "-", "--device", "cpu", stdin=""),
                      "--plan -: standard input is empty")
    line = "vllm serve nvidia/Nemotron-H-8B-Base-8K --tensor-parallel-size {} --kv-transfer-config " \
           "'{{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}}'"
    result = run_cli("preflight", "--prefill-file", "-", "--decode", line.format(2), "--format", "json",
                     stdin=line.format(1))
    engines = json.loads(result.stdout)["engines"]
    assert (engines["prefill"]["tp"], engines["decode"]["tp"]) == (1, 2), result.stderr
    assert_user_error(run_cli("preflight", "--prefill-file", "-", "--decode-file", "-", stdin=line.format(1)),
                      "standard input holds one of them")
