"""Find the processes of one execute run by a tag in their environment (ranks inherit it)."""

from __future__ import annotations

import os
import random
import signal
import socket
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
    timeout ends it otherwise, and a command that ended first fails the wait with its own stderr."""
    while not reached(log, rank, fragment):
        ended = [c for c in commands if c.poll() is not None]
        if ended:
            try:
                said = ended[0].communicate(timeout=10)[1]
            except Exception as exc:   # its ranks may still hold the pipe
                said = f"(its stderr unread: {exc})"
            raise AssertionError(f"{rank} never reported {fragment!r}; {ended[0].args[4:]} ended "
                                 f"({ended[0].returncode}), saying:\n{said}\nprogress:\n"
                                 f"{log.read_text() if log.exists() else ''}")
        time.sleep(0.05)


def free_port(count: int = 1, host: str = "0.0.0.0") -> int:
    """A port with ``count`` free ports from it on, below the kernel's ephemeral range: a port the
    kernel hands out (to another test's NIXL, UCX or etcd socket) could be taken between this check
    and the run's own bind, one below that range only by a test that names it. Random, so two
    xdist workers rarely pick the same one, and checked free."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    low = 10000 if ephemeral > 12000 else 1024
    for _ in range(200):
        port = random.randrange(low, ephemeral - count)
        if all(_free(host, port + i) for i in range(count)):
            return port
    raise RuntimeError(f"no {count} free ports in {low}..{ephemeral - 1}")


def _free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
            return True
        except OSError:
            return False


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
