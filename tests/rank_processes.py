"""Find the processes of one execute run by a tag in their environment (ranks inherit it)."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

TAG = "MAMBAXFER_TEST_RUN"


def new_tag() -> dict[str, str]:
    return {TAG: uuid.uuid4().hex}


def tagged(env: dict[str, str]) -> list[int]:
    """PIDs of live processes whose environment carries this tag."""
    needle = f"{TAG}={env[TAG]}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def assert_no_rank_left(env: dict[str, str], within: float = 30.0) -> None:
    """No process of the run is alive (``within``: a ceiling for ranks whose coordinator was killed
    to notice it, checked as soon as they are gone)."""
    end = time.time() + within
    while (left := tagged(env)) and time.time() < end:
        time.sleep(0.1)
    assert not left, f"processes of the run still alive: {left}"


PROGRESS_LOG = "MAMBAXFER_PROGRESS_LOG"   # the coordinator appends each rank's every new state there


def reached(log: Path, rank: str, fragment: str) -> bool:
    """Whether ``rank`` reported a state holding ``fragment`` (phase or detail)."""
    try:
        lines = log.read_text().splitlines()
    except OSError:
        return False
    return any(line.startswith(f"{rank}\t") and fragment in line for line in lines)


def wait_until(log: Path, rank: str, fragment: str, *commands) -> None:
    """Follow a run until ``rank`` reports ``fragment``: no clock, the run's own no-progress
    timeout ends it otherwise, and a command that ended first fails the wait."""
    while not reached(log, rank, fragment):
        ended = [c for c in commands if c.poll() is not None]
        assert not ended, f"{rank} never reported {fragment!r}; a command ended ({ended[0].returncode}): " \
                          f"{log.read_text() if log.exists() else ''}"
        time.sleep(0.05)


def as_a_shell_starts() -> None:
    """``preexec_fn`` of a command a test will signal: Ctrl-C, SIGTERM and SIGHUP with their default
    action, as an interactive shell starts a command (a test run in the background inherits them
    ignored, and mambaxfer keeps a signal it was started ignoring ignored, as ``nohup`` wants)."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def assert_fault_fails_the_run(fault: str, args: tuple[str, ...], *fragments: str) -> None:
    """The command with one rank's fault planted (``rank:action@point``): a failed run saying
    ``fragments`` in one line, and no rank left."""
    from cli_run import assert_run_failed, run_cli
    from mambaxfer_cli.execute.faults import FAULT_ENV

    env = {**new_tag(), FAULT_ENV: fault}
    result = run_cli(*args, env=env)
    assert_run_failed(result, *fragments)
    assert_no_rank_left(env)
