"""``mambaxfer execute`` under faults: each ends with one clear message within the timeout, a
non-zero exit, and no rank process left behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from cli_run import assert_refused, assert_run_failed, assert_user_error, messages, run_cli
from mambaxfer_cli.execute.faults import FAULT_ENV
from rank_processes import PROGRESS_LOG, as_a_shell_starts, assert_no_rank_left, new_tag, tagged, wait_until

SMALL = ("--model", "jamba", "--layers", "8", "--device", "cpu", "--iters", "1")


def run_with(*args: str, env: dict | None = None, timeout: float = 60):
    started = time.time()
    result = run_cli("execute", *SMALL, *args, env=env, timeout=timeout)
    return result, time.time() - started


@pytest.mark.usefixtures("nixl")
@pytest.mark.parametrize("fault,p_tp,d_tp,message", [
    ("P0:die@serve", 1, 2, "P0 died (exit code 70) while serving"),
    ("P1:die@fill", 2, 1, "P1 died (exit code 70) while filling"),
    ("D1:die@transfer", 1, 2, "D1 died (exit code 70)"),
])
def test_a_rank_that_dies(fault, p_tp, d_tp, message):
    env = {**new_tag(), FAULT_ENV: fault}
    result, _ = run_with("--p-tp", str(p_tp), "--d-tp", str(d_tp), "--timeout", "120", env=env, timeout=300)
    assert_run_failed(result, message)      # at once: a death is an event, not a timeout
    assert_no_rank_left(env)


@pytest.mark.usefixtures("nixl")
def test_a_peer_that_never_answers():
    # --timeout counts only while nothing progresses: the ranks' start, however slow the machine
    # is today, is progress; P0 stuck in its answer is not.
    env = {**new_tag(), FAULT_ENV: "P0:hang@serve"}
    result, _ = run_with("--p-tp", "1", "--d-tp", "2", "--timeout", "5", env=env, timeout=300)
    assert_run_failed(result, "timed out: P0 serving (answering D", "made no progress for 5s (--timeout)",
                      "waiting for P0's side channel 127.0.0.1:")
    assert_no_rank_left(env)


@pytest.mark.usefixtures("nixl")
def test_a_rank_stuck_before_its_reads_is_named():
    env = {**new_tag(), FAULT_ENV: "D0:hang@prepare"}
    result, _ = run_with("--p-tp", "1", "--d-tp", "2", "--timeout", "5", env=env, timeout=300)
    assert_run_failed(result, "timed out: D0 exchanging (loading P0's metadata) made no progress for 5s",
                      "D1 preparing (waiting for every D rank to prepare)")
    assert_no_rank_left(env)


@pytest.mark.usefixtures("nixl")
def test_killing_the_command_leaves_no_rank_behind(tmp_path):
    log = tmp_path / "progress.log"
    env = {**os.environ, **new_tag(), FAULT_ENV: "P0:hang@serve", PROGRESS_LOG: str(log), "COLUMNS": "160"}
    cli = subprocess.Popen([sys.executable, "-m", "mambaxfer_cli", "execute", *SMALL, "--p-tp", "2", "--d-tp", "2",
                            "--timeout", "300"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(log, "P0", "answering D", cli)      # P0 hangs in its side channel, the others wait
        cli.send_signal(signal.SIGKILL)
        cli.wait(60)
        assert_no_rank_left(env)   # each rank sees its coordinator gone and ends
    finally:
        cli.kill()


@pytest.mark.usefixtures("nixl")      # the port is checked where the ranks would start
def test_a_port_already_in_use():
    env = new_tag()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result, _ = run_with("--p-tp", "2", "--d-tp", "1", "--port", str(port - 1), env=env)
    assert_user_error(result, f"127.0.0.1:{port} (P1's side channel) is already in use", "--port 0")
    assert_no_rank_left(env)


def test_nixl_not_installed(tmp_path):
    # A PYTHONPATH shim that shadows NIXL's packages: the ranks' import fails as on a machine without it.
    for module in ("nixl", "nixl_cu12", "nixl_cu13"):
        (tmp_path / f"{module}.py").write_text(f"raise ModuleNotFoundError(\"No module named '{module}'\", "
                                               f"name='{module}')\n")
    env = {**new_tag(), "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    result, _ = run_with("--p-tp", "1", "--d-tp", "2", "--timeout", "120", env=env, timeout=300)
    assert_user_error(result, "NIXL cannot be imported (No module named 'nixl')", "pip install")
    assert_no_rank_left(env)


@pytest.fixture
def plan_file(tmp_path):
    path = tmp_path / "plan.json"
    written = run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--p-num-blocks", "64",
                      "--d-num-blocks", "64", "--output", str(path))
    assert written.code == 0, written.stderr
    return path


def test_corrupt_plan_file(plan_file):
    plan_file.write_text(plan_file.read_text()[:2000])
    result = run_cli("execute", "--plan", str(plan_file), "--device", "cpu")
    assert_user_error(result, f"--plan {plan_file}: not a readable plan document")


def test_plan_file_missing_a_field(plan_file):
    document = json.loads(plan_file.read_text())
    del document["engines"]["decode"]
    plan_file.write_text(json.dumps(document))
    result = run_cli("execute", "--plan", str(plan_file), "--device", "cpu")
    assert_user_error(result, "corrupt plan document (missing or malformed field: 'decode')")


def test_edited_plan_file_does_not_match(plan_file):
    document = json.loads(plan_file.read_text())
    document["descriptors"]["reads"][1]["remote_ids"][3] += 1
    plan_file.write_text(json.dumps(document))
    result = run_cli("execute", "--plan", str(plan_file), "--device", "cpu")
    assert_user_error(result, "does not match the plan mambaxfer makes for jamba",
                      "at descriptors.reads[1].remote_ids[3]")


def test_plan_file_of_another_model_or_pairing(plan_file):
    assert_user_error(run_cli("execute", "--plan", str(plan_file), "--model", "mamba-130m", "--device", "cpu"),
                      "at model.name the file has \"jamba\"")
    assert_user_error(run_cli("execute", "--plan", str(plan_file), "--d-tp", "4", "--device", "cpu"),
                      "--d-tp 4 does not match")
    assert_user_error(run_cli("execute", "--plan", str(plan_file), "--blocks", "8", "--device", "cpu"),
                      "--blocks: the plan file fixes")


@pytest.mark.usefixtures("nixl")      # the memory is checked where the ranks' tasks are made
def test_plan_too_large_to_execute(tmp_path):
    path = tmp_path / "full-scale.json"
    assert run_cli("plan", "--model", "nemotron-h-8b", "--p-tp", "1", "--d-tp", "1", "--output", str(path)).code == 0
    result = run_cli("execute", "--plan", str(path), "--device", "cpu")
    assert_user_error(result, "this plan cannot be executed: its engines need", "GiB of DRAM")


def test_plan_of_one_d_rank(tmp_path):
    path = tmp_path / "one.json"
    assert run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--d-rank", "1",
                   "--output", str(path)).code == 0
    assert_user_error(run_cli("execute", "--plan", str(path)), "holds 1 of 2 D ranks")


@pytest.mark.parametrize("args,message", [
    (("--p-tp", "1", "--d-tp", "2", "--request-blocks", "0"), "--request-blocks must be >= 1"),
    (("--p-tp", "1", "--d-tp", "2", "--blocks", "3"), "needs at least 16 logical blocks"),
    (("--p-tp", "1", "--d-tp", "2", "--layers", "0"), "--layers must be >= 1"),
    (("--p-tp", "1", "--d-tp", "2", "--iters", "0"), "--iters must be >= 1"),
    (("--p-tp", "1", "--d-tp", "2", "--timeout", "0"), "--timeout must be a positive"),
    (("--p-tp", "1", "--d-tp", "2", "--port", "70000"), "not a port number"),
])
def test_user_errors(args, message):
    assert_user_error(run_with(*args)[0], message)


def test_a_tp_size_vllm_does_not_start_is_its_refusal():
    assert_refused(run_with("--p-tp", "3", "--d-tp", "1")[0], "vLLM does not start a TP-3 engine")


def test_model_and_tp_are_needed_without_a_plan():
    assert_user_error(run_cli("execute", "--model", "jamba"), "execute needs --p-tp, --d-tp (or --plan FILE)")


def test_device_cuda_without_a_gpu():
    from mambaxfer_cli.execute.device import visible_gpus

    if visible_gpus():
        pytest.skip("this machine has a GPU")
    result = run_cli("execute", "--model", "jamba", "--p-tp", "1", "--d-tp", "1", "--device", "cuda")
    assert_user_error(result, "--device cuda: no CUDA GPU")


def rank_pid(env: dict, name: str) -> int:
    """The process of rank ``name`` (its name ends its command line)."""
    for pid in tagged(env):
        try:
            if open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[-2] == name.encode():
                return pid
        except (OSError, IndexError):
            continue
    raise AssertionError(f"no process of rank {name}")


@pytest.mark.usefixtures("nixl")
@pytest.mark.parametrize("how", ["P0 killed", "Ctrl-C"])
def test_native_lines_never_reach_the_terminal(tmp_path, how):
    """While D reads (many iterations), P0's process is killed, or the command gets Ctrl-C: NIXL and
    UCX complain on the ranks' own stderr (a remote agent disconnected, UCX errors); the user sees
    one line. A failed run's line names the log that keeps the ranks' output."""
    log = tmp_path / "progress.log"
    env = {**os.environ, **new_tag(), PROGRESS_LOG: str(log), "COLUMNS": "160"}
    cli = subprocess.Popen([sys.executable, "-m", "mambaxfer_cli", "execute", "--model", "jamba", "--layers", "8",
                            "--device", "cpu", "--p-tp", "1", "--d-tp", "2", "--iters", "100000", "--timeout", "120"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=as_a_shell_starts)
    try:
        for rank in ("D0", "D1"):
            wait_until(log, rank, "iteration 3/", cli)
        if how == "P0 killed":
            os.kill(rank_pid(env, "P0"), signal.SIGKILL)
        else:
            cli.send_signal(signal.SIGINT)
        out, err = cli.communicate(timeout=300)
    finally:
        cli.kill()
    lines = messages(err)
    assert out == "" and len(lines) == 1, err
    if how == "Ctrl-C":
        assert cli.returncode == 130 and lines == ["interrupted"]
    else:
        assert cli.returncode == 3 and lines[0].startswith("error: P0 died (killed by SIGKILL)"), err
        if "own output is in " in lines[0]:
            path = lines[0].rsplit("own output is in ", 1)[1]
            assert os.path.getsize(path) > 0
            os.unlink(path)
    assert_no_rank_left(env)


@pytest.mark.usefixtures("nixl")
def test_a_rank_that_works_longer_than_the_timeout_is_not_a_fault():
    # P0 computes for 4 s after filling and says nothing meanwhile; --timeout is 1.5 s. Working is
    # progress (its CPU time grows), so the run completes; the same silence asleep is a stall.
    env = {**new_tag(), FAULT_ENV: "P0:work@fill"}
    result, _ = run_with("--p-tp", "1", "--d-tp", "2", "--timeout", "1.5", env=env, timeout=300)
    assert result.code == 0, result.stderr
    assert result.stdout.count("verified") == 2
    asleep = {**new_tag(), FAULT_ENV: "P0:hang@fill"}
    result, _ = run_with("--p-tp", "1", "--d-tp", "2", "--timeout", "1.5", env=asleep, timeout=300)
    assert_run_failed(result, "timed out: P0 filling (page ")
    assert_no_rank_left(env)
    assert_no_rank_left(asleep)
