"""Stopping ``execute`` from outside: Ctrl-C (SIGINT to the whole process group, as a terminal
sends it), SIGTERM to the CLI, SIGHUP to the group. Each ends with one line, its exit code, and no
rank process left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from mambaxfer_cli.execute.faults import FAULT_ENV
from rank_processes import as_a_shell_starts, assert_no_rank_left, new_tag, tagged


@pytest.mark.usefixtures("nixl")
@pytest.mark.parametrize("signum,to_group,code,line", [
    (signal.SIGINT, True, 130, "interrupted"),
    (signal.SIGTERM, False, 143, "stopped by SIGTERM"),
    (signal.SIGHUP, True, 129, "stopped by SIGHUP"),
])
def test_a_stopped_run_leaves_one_line_and_no_process(signum, to_group, code, line):
    # P0 never answers, so the run is surely in flight when the signal comes.
    env = {**os.environ, **new_tag(), FAULT_ENV: "P0:hang@serve", "COLUMNS": "160"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mambaxfer_cli", "execute", "--model", "jamba", "--layers", "8", "--device", "cpu",
         "--p-tp", "1", "--d-tp", "2", "--iters", "1", "--timeout", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
        preexec_fn=as_a_shell_starts)
    try:
        end = time.time() + 60
        while len(tagged(env)) < 4 and time.time() < end:   # the CLI and its three ranks
            time.sleep(0.2)
        assert len(tagged(env)) >= 4, "the ranks never started"
        time.sleep(1.0)
        os.killpg(proc.pid, signum) if to_group else os.kill(proc.pid, signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, (proc.returncode, err)
    assert out == "" and err.strip().splitlines() == [line], err
    assert_no_rank_left(env)


# --- a signal at any moment from the command's first line ---------------------------------------

LINES = {signal.SIGINT: "interrupted", signal.SIGTERM: "stopped by SIGTERM", signal.SIGHUP: "stopped by SIGHUP"}


def caught(pid: int, signum: int = signal.SIGHUP) -> bool:
    """Whether the process handles ``signum`` itself yet. Python handles SIGINT from its own start;
    SIGHUP only once mambaxfer's entry point installed its handlers (its first act)."""
    try:
        status = open(f"/proc/{pid}/status").read()
    except OSError:
        return False
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask >> (signum - 1) & 1)


def assert_stopped_or_done(proc: subprocess.Popen, signum: int, out: str, err: str) -> bool:
    """The signal's code and its one line, or (it came too late) the command's own clean end.
    Returns whether the signal stopped it."""
    assert "Traceback" not in err, err
    if proc.returncode == 0:
        assert err == "" and out, (out, err)
        return False
    assert proc.returncode == 128 + signum, (proc.returncode, err)
    assert err.splitlines() == [LINES[signum]], err
    return True


@pytest.mark.parametrize("signum", list(LINES), ids=[s.name for s in LINES])
def test_a_signal_while_the_command_starts_is_one_line(signum):
    """From the entry point's first act on (it handles the signal), at growing delays: while the
    command line's modules import, while it plans, as it prints."""
    stopped = []
    for delay in (0.0, 0.01, 0.03, 0.06, 0.1, 0.2, 0.4):
        proc = subprocess.Popen([sys.executable, "-m", "mambaxfer_cli", "plan", "--model", "jamba", "--p-tp", "1",
                                 "--d-tp", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=as_a_shell_starts)
        try:
            while proc.poll() is None and not caught(proc.pid):
                time.sleep(0.0005)
            time.sleep(delay)
            if proc.poll() is None:
                proc.send_signal(signum)
            out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
        stopped.append(assert_stopped_or_done(proc, signum, out, err))
    assert stopped[0], "the signal sent as the command started did not stop it"


def rank_processes(env: dict, cli: int) -> list[int]:
    """The rank processes the command started so far (its children that carry the run's tag)."""
    found = []
    for pid in tagged(env):
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        if int(stat[stat.rfind(")") + 2:].split()[1]) == cli:
            found.append(pid)
    return found


@pytest.mark.usefixtures("nixl")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
@pytest.mark.parametrize("appearing", [1, 2, 3, 4])
def test_a_signal_as_each_rank_starts_is_never_lost(signum, appearing):
    """Sent the moment the n-th rank process appears: the command stops with the signal's code and
    one line (it used to be dropped, and the run went on to exit 0), and no rank is left."""
    env = {**os.environ, **new_tag(), "COLUMNS": "160"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mambaxfer_cli", "execute", "--model", "jamba", "--layers", "2", "--p-tp", "2",
         "--d-tp", "2", "--device", "cpu", "--iters", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env, preexec_fn=as_a_shell_starts)
    try:
        while proc.poll() is None and len(rank_processes(env, proc.pid)) < appearing:
            time.sleep(0.001)
        assert proc.poll() is None, "the run ended before its ranks started"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, (proc.returncode, err)
    assert out == "" and err.splitlines() == [LINES[signum]], err
    assert_no_rank_left(env)


def test_a_signal_the_command_was_started_ignoring_stays_ignored():
    # nohup, or a background job's Ctrl-C: the command keeps ignoring it and ends as it would.
    def ignoring() -> None:
        as_a_shell_starts()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    proc = subprocess.Popen([sys.executable, "-m", "mambaxfer_cli", "plan", "--model", "jamba", "--p-tp", "1",
                             "--d-tp", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ignoring)
    try:
        while proc.poll() is None and not caught(proc.pid, signal.SIGTERM):    # its handlers are in
            time.sleep(0.0005)
        proc.send_signal(signal.SIGHUP)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0 and err == "" and "jamba" in out, (proc.returncode, err)


WEAKREF_STOP = """
import os, signal, sys, weakref
from mambaxfer_cli import exits
exits.install()
class Thing:
    pass
thing = Thing()
def callback(ref):
    os.kill(os.getpid(), signal.SIGTERM)     # Python runs the handler here, inside the callback
    for _ in range(1000):
        pass
ref = weakref.ref(thing, callback)
try:
    del thing
    for _ in range(10 ** 6):
        pass
    print("not stopped")
except KeyboardInterrupt as stop:
    sys.exit(exits.report(stop))
"""


def test_a_signal_handled_inside_a_callback_still_stops_the_command():
    """Importing a module runs importlib's weakref callbacks; a signal handled inside one raises
    where Python can only print 'Exception ignored'. It must still end the command, with its line."""
    proc = subprocess.run([sys.executable, "-c", WEAKREF_STOP], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (143, "", "stopped by SIGTERM\n")
