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

from mambaxfer_cli.execute.rank import FAULT_ENV
from rank_processes import assert_no_rank_left, new_tag, tagged


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
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
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
