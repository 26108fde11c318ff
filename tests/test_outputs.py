"""``--output`` and ``--junit``: a regular file replaced whole, a symlink followed, a device written
through (never turned into a file), a full disk one line that keeps check's verdict, the umask."""

from __future__ import annotations

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
