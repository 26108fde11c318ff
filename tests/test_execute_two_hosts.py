"""Two-host ``execute``: the prefill and decode sides as separate ``mambaxfer`` processes that find
each other through NIXL's own metadata exchange (its listener on 127.0.0.2, or etcd on loopback),
compare their geometry, move real bytes and verify every one; refusals, faults and no orphans."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli_run import assert_user_error, messages, run_cli
from mambaxfer_cli.engines.vllm.transfer.plan_source import plan_to_execute
from mambaxfer_cli.execute.tasks import cut_layers
from mambaxfer_cli.execute.faults import FAULT_ENV
from mambaxfer_cli.engines.vllm.transfer.tasks import build_tasks
from mambaxfer_cli.execute.tasks import RunSettings
from mambaxfer_cli.readers.model_source import load_model
from rank_processes import PROGRESS_LOG, as_a_shell_starts, assert_no_rank_left, free_port, new_tag, wait_until

P_HOST = "127.0.0.2"
JAMBA = ("--model", "jamba", "--layers", "8")                  # Mamba1 + attention, 8 KV-cache groups
GRANITE = ("--model", "granite-4.0-h-tiny", "--layers", "6", "--semantics", "exact")   # Mamba2 + attention


@dataclass
class Side:
    code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def doc(self) -> dict:
        return json.loads(self.stdout)


class Pair:
    """Both sides of one run, each its own CLI process; one environment tag finds all of their ranks,
    and each side's progress log says how far its ranks got (tests wait on it, never on the clock)."""

    def __init__(self, common: tuple, prefill: tuple, decode: tuple, env: dict | None = None,
                 p_env: dict | None = None, d_env: dict | None = None, start_prefill: bool = True) -> None:
        import tempfile

        self.tag = new_tag()
        self.logs = Path(tempfile.mkdtemp(prefix="mambaxfer-pair-"))
        self.p_log, self.d_log = self.logs / "prefill.log", self.logs / "decode.log"
        self.base = {**os.environ, "COLUMNS": "160", **self.tag, **(env or {})}
        self.cmd = [sys.executable, "-m", "mambaxfer_cli", "execute", "--device", "cpu", "--iters", "1", *common]
        self.p_args, self.p_env = prefill, p_env
        self.started = time.time()
        self.decode = subprocess.Popen([*self.cmd, "--role", "decode", *decode],
                                       env={**self.base, PROGRESS_LOG: str(self.d_log), **(d_env or {})},
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       preexec_fn=as_a_shell_starts)
        self.prefill: subprocess.Popen | None = None
        if start_prefill:
            self.start_prefill()

    def start_prefill(self) -> None:
        self.prefill = subprocess.Popen([*self.cmd, "--role", "prefill", *self.p_args],
                                        env={**self.base, PROGRESS_LOG: str(self.p_log), **(self.p_env or {})},
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                        preexec_fn=as_a_shell_starts)

    def _result(self, proc: subprocess.Popen, timeout: float) -> Side:
        out, err = proc.communicate(timeout=timeout)
        return Side(proc.returncode, out, err, time.time() - self.started)

    def results(self, timeout: float = 600) -> tuple[Side, Side]:
        """Both sides' ends (``timeout``: a ceiling against a hang; each side's own --timeout, which
        counts only while nothing progresses, ends it first)."""
        try:
            return self._result(self.prefill, timeout), self._result(self.decode, timeout)
        finally:
            self.prefill.kill()
            self.decode.kill()
            shutil.rmtree(self.logs, ignore_errors=True)

    def wait_decode(self, rank: str, fragment: str) -> None:
        wait_until(self.d_log, rank, fragment, self.decode, *([self.prefill] if self.prefill else []))

    def wait_prefill(self, rank: str, fragment: str) -> None:
        wait_until(self.p_log, rank, fragment, self.prefill, self.decode)


def direct(p_tp: int) -> tuple[tuple, tuple]:
    port = free_port(p_tp)
    return ("--listen", f"{P_HOST}:{port}"), ("--peer", f"{P_HOST}:{port}")


def via_etcd(url: str) -> tuple[str, ...]:
    return ("--etcd", url, "--run-id", f"test-{os.getpid()}-{time.time_ns()}")


def assert_only_our_lines(side: Side, last: str) -> None:
    """stderr holds the side's own first line and ``last``: nothing else (no NIXL or UCX line)."""
    lines = [line for line in messages(side.stderr) if line.strip()]
    assert len(lines) == 2 and lines[0].split(":")[0] in ("prefill side", "decode side"), side.stderr
    assert lines[1].startswith(last), side.stderr


def assert_failed(side: Side, code: int, *fragments: str) -> None:
    """Exit ``code``, no traceback, nothing on stdout, the error as the one line after the side's own."""
    assert side.code == code, (side.code, side.stdout, side.stderr)
    assert side.stdout == ""
    assert_only_our_lines(side, "error: ")
    last = messages(side.stderr.strip())[-1]
    for fragment in fragments:
        assert fragment in last, (fragment, side.stderr)


def expected_decode(model: tuple, p_tp: int, d_tp: int):
    spec = cut_layers(load_model(model[1]), int(model[3]))
    plan = plan_to_execute(spec, p_tp, d_tp, semantics="exact", coalesce=False, blocks=None,
                           request_blocks=2, seed=0)
    return build_tasks(plan, RunSettings("t", "cpu", 0, "127.0.0.1", 0, 1))


def assert_verified_run(prefill: Side, decode: Side, model: tuple, p_tp: int, d_tp: int) -> None:
    assert decode.code == 0, decode.stderr
    assert prefill.code == 0, prefill.stderr
    p_tasks, d_tasks = expected_decode(model, p_tp, d_tp)
    d_doc, p_doc = decode.doc, prefill.doc
    assert d_doc["role"] == "decode" and d_doc["verified"] and d_doc["prefill"] == []
    assert [d["d_rank"] for d in d_doc["decode"]] == list(range(d_tp))
    for d, task in zip(d_doc["decode"], d_tasks):
        # The plan's reads and every byte of D's registered memory, as on one host.
        assert d["sources"] == list(task.sources)
        assert d["descriptors_posted"] == sum(len(r.local_ids) for r in task.reads)
        assert d["telemetry_bytes"] == d["bytes"] > 0
        assert d["verdict"] == {**d["verdict"], "ok": True, "wrong_bytes": 0,
                                "checked_bytes": task.memory.total_bytes}
    assert p_doc["role"] == "prefill" and p_doc["decode"] == [] and p_doc["verified"] is None
    assert [p["p_rank"] for p in p_doc["prefill"]] == list(range(p_tp))
    for p, task in zip(p_doc["prefill"], p_tasks):
        assert [s["d_rank"] for s in p["served"]] == list(task.consumers)
        assert all(s["notifications"] >= 1 for s in p["served"])   # at least the READ's own
    # What P served is what D moved.
    served = {(p["p_rank"], s["d_rank"]): s["bytes"] for p in p_doc["prefill"] for s in p["served"]}
    assert sum(served.values()) == d_doc["total_bytes"]


pytestmark = pytest.mark.usefixtures("nixl")


@pytest.mark.parametrize("model,p_tp,d_tp", [(JAMBA, 1, 2), (GRANITE, 2, 1)],
                         ids=["P_TP_1-D_TP_2-jamba", "P_TP_2-D_TP_1-granite"])
def test_direct_two_sides_verify_every_byte(model, p_tp, d_tp):
    listen, peer = direct(p_tp)
    pair = Pair((*model, "--p-tp", str(p_tp), "--d-tp", str(d_tp), "--format", "json", "--timeout", "120"),
                listen, peer)
    prefill, decode = pair.results()
    assert_verified_run(prefill, decode, model, p_tp, d_tp)
    assert f"through NIXL listener{'s' if p_tp > 1 else ''} {P_HOST}:" in prefill.stderr
    assert_no_rank_left(pair.tag)


@pytest.mark.parametrize("model,p_tp,d_tp", [(GRANITE, 1, 2), (JAMBA, 2, 1)],
                         ids=["P_TP_1-D_TP_2-granite", "P_TP_2-D_TP_1-jamba"])
def test_etcd_two_sides_verify_every_byte(etcd, model, p_tp, d_tp):
    found = via_etcd(etcd)
    pair = Pair((*model, "--p-tp", str(p_tp), "--d-tp", str(d_tp), "--format", "json", "--timeout", "120", *found),
                (), ())
    prefill, decode = pair.results()
    assert_verified_run(prefill, decode, model, p_tp, d_tp)
    assert f"through etcd {etcd}, run {found[-1]}" in decode.stderr
    assert_no_rank_left(pair.tag)


def test_decode_started_first_waits_for_prefill_and_prints_the_tables():
    """The order a user may start them in; the table output of both sides."""
    listen, peer = direct(1)
    pair = Pair((*JAMBA, "--p-tp", "1", "--d-tp", "2", "--timeout", "120"), listen, peer, start_prefill=False)
    pair.wait_decode("D1", "waiting for P0's agent metadata")   # D asks P's listener again and again
    pair.start_prefill()
    prefill, decode = pair.results()
    assert decode.code == 0 and prefill.code == 0, (decode.stderr, prefill.stderr)
    assert decode.stdout.count("verified") == 2 and "decode side" in decode.stdout
    assert "P rank" in prefill.stdout and "D0, D1" in prefill.stdout and "READ notifications" in prefill.stdout
    assert_no_rank_left(pair.tag)


def test_etcd_entry_of_a_killed_prefill_does_not_hold_up_the_next_run(etcd):
    """A killed prefill side leaves its agent's entry in etcd; a decode side that loads it finds
    the agent gone and asks again, until the next prefill side of the run id publishes."""
    found = via_etcd(etcd)
    common = (*JAMBA, "--p-tp", "1", "--d-tp", "2", "--format", "json", "--timeout", "120", *found)
    first = Pair(common, (), (), d_env={FAULT_ENV: "D0:hang@prepare"})   # a run that gets as far as it can
    first.wait_decode("D1", "waiting for every D rank to prepare")
    first.prefill.send_signal(signal.SIGKILL)
    first.decode.send_signal(signal.SIGKILL)
    first.results()
    assert_no_rank_left(first.tag)
    pair = Pair(common, (), (), start_prefill=False)
    for rank in ("D0", "D1"):      # asking etcd, where only the dead agent's entry is yet
        pair.wait_decode(rank, "waiting for P0's agent metadata")
    pair.start_prefill()
    prefill, decode = pair.results()
    assert_verified_run(prefill, decode, JAMBA, 1, 2)
    assert_no_rank_left(pair.tag)


# --- refusals: each side plans from its own command line; the geometry names the first difference

@pytest.mark.parametrize("prefill_args,decode_args,field,values", [
    ((), ("--ssm-dtype", "float32"), "model.ssm_dtype", ('prefill has "bfloat16"', 'decode has "float32"')),
    # Jamba: --block-size 32 gives 96-token blocks; vLLM 0.34's default 64 gives 128.
    (("--block-size", "32", "--vllm-version", "0.34"), ("--vllm-version", "0.34"), "engines.prefill.block_size",
     ("prefill has 96", "decode has 128")),
    (("--blocks", "40"), (), "engines.prefill.num_blocks", ("prefill has 40", "decode has 32")),
], ids=["ssm-dtype", "block-size", "blocks"])
def test_direct_mismatch_is_refused_on_both_sides(prefill_args, decode_args, field, values):
    listen, peer = direct(1)
    pair = Pair((*JAMBA, "--p-tp", "1", "--d-tp", "2", "--timeout", "120"), (*listen, *prefill_args),
                (*peer, *decode_args))
    prefill, decode = pair.results()
    message = f"prefill and decode disagree on {field}: {values[0]}, {values[1]}"
    assert_failed(prefill, 2, "P0: refused D", message)
    assert_failed(decode, 2, "P0 refused this decode run", message)
    assert "verified" not in decode.stdout + decode.stderr
    assert_no_rank_left(pair.tag)


@pytest.mark.parametrize("prefill_args,decode_args,field", [
    (("--num-spec", "2"), (), "model.num_spec"),
    ((*GRANITE,), (*JAMBA,), "model.name"),
], ids=["num-spec", "model"])
def test_etcd_mismatch_is_refused_on_both_sides(etcd, prefill_args, decode_args, field):
    base = ("--model", "qwen3.5-0.8b", "--layers", "4") if field == "model.num_spec" else ()
    pair = Pair((*base, "--p-tp", "1", "--d-tp", "1", "--timeout", "120", *via_etcd(etcd)),
                prefill_args, decode_args)
    prefill, decode = pair.results()
    assert_failed(prefill, 2, f"prefill and decode disagree on {field}: prefill has")
    assert_failed(decode, 2, f"prefill and decode disagree on {field}: prefill has")
    assert_no_rank_left(pair.tag)


# --- faults: every wait ends within --timeout, exit 3, one clear line, no process of ours left

def test_a_peer_address_nobody_listens_on():
    _, peer = direct(1)
    tag = new_tag()
    result = run_cli("execute", *JAMBA, "--p-tp", "1", "--d-tp", "2", "--device", "cpu", "--timeout", "5",
                     "--role", "decode", *peer, env=tag, timeout=300)
    side = Side(result.code, result.stdout, result.stderr, 0)
    assert_failed(side, 3, "timed out: nothing happened for 5s (--timeout)",
                  f"D0 exchanging (waiting for P0's agent metadata from NIXL listener {peer[1]})")
    assert_no_rank_left(tag)


def test_prefill_killed_while_decode_waits():
    """P's ranks hang after registering (NIXL's listener still answers): D sends hello, waits for an
    answer, and learns P is gone from its pings when P's command is killed."""
    listen, peer = direct(1)
    pair = Pair((*JAMBA, "--p-tp", "1", "--d-tp", "2", "--timeout", "120"), listen, peer,
                p_env={FAULT_ENV: "P0:hang@serve"})
    for rank in ("D0", "D1"):
        pair.wait_decode(rank, "waiting for P0's answer")
    pair.prefill.send_signal(signal.SIGKILL)
    prefill, decode = pair.results()
    assert prefill.code == -signal.SIGKILL
    assert_failed(decode, 3, "P0 (mambaxfer-direct-P0) went away")   # from its pings: no timeout, no clock
    assert_no_rank_left(pair.tag)


@pytest.mark.parametrize("how", ["rank dies", "command killed"])
def test_decode_killed_mid_transfer(how):
    listen, peer = direct(1)
    fault = "D1:die@transfer" if how == "rank dies" else "D1:hang@transfer"
    pair = Pair((*JAMBA, "--p-tp", "1", "--d-tp", "2", "--timeout", "120"), listen, peer, d_env={FAULT_ENV: fault})
    if how == "command killed":
        pair.wait_decode("D0", "done")       # D0 read and verified; D1 hangs where it would post its READ
        pair.decode.send_signal(signal.SIGKILL)
    prefill, decode = pair.results()
    # the side that went away first, NIXL's own error as its detail
    assert_failed(prefill, 3, "D1 (mambaxfer-direct-D1) went away before its last READ completed", "; NIXL: nixl")
    if how == "rank dies":
        assert_failed(decode, 3, "D1 died (exit code 70)")
    assert_no_rank_left(pair.tag)


@pytest.mark.parametrize("side", ["prefill", "decode"])
def test_ctrl_c_on_one_side_ends_both(side):
    """SIGINT to one command (its ranks busy after the handshake): it stops its ranks, and the
    other side learns from its pings that they are gone."""
    listen, peer = direct(1)
    faults = ({"p_env": {FAULT_ENV: "P0:hang@serve"}} if side == "prefill"
              else {"d_env": {FAULT_ENV: "D1:hang@transfer"}})
    pair = Pair((*JAMBA, "--p-tp", "1", "--d-tp", "2", "--timeout", "120"), listen, peer, **faults)
    if side == "prefill":
        for rank in ("D0", "D1"):
            pair.wait_decode(rank, "waiting for P0's answer")
    else:
        pair.wait_decode("D0", "done")
    (pair.prefill if side == "prefill" else pair.decode).send_signal(signal.SIGINT)
    prefill, decode = pair.results()
    interrupted, other = (prefill, decode) if side == "prefill" else (decode, prefill)
    assert interrupted.code == 130 and interrupted.stdout == ""
    assert_only_our_lines(interrupted, "interrupted")
    gone = "P0 (mambaxfer-direct-P0) went away" if side == "prefill" else "D1 (mambaxfer-direct-D1) went away"
    assert_failed(other, 3, gone)          # from its pings, not a timeout: the other side's --timeout is 120 s
    assert_no_rank_left(pair.tag)


def test_prefill_without_a_decode_side_times_out():
    listen, _ = direct(2)
    tag = new_tag()
    result = run_cli("execute", *GRANITE, "--p-tp", "2", "--d-tp", "1", "--device", "cpu", "--timeout", "4",
                     "--role", "prefill", *listen, env=tag, timeout=300)
    assert_failed(Side(result.code, result.stdout, result.stderr, 0), 3, "timed out: nothing happened for 4s",
                  "P0 serving (waiting for the hello of D0)", "P1 serving (waiting for the hello of D0)")
    assert_no_rank_left(tag)


# --- user errors, before any rank starts ---------------------------------------------------------

SMALL = ("execute", *JAMBA, "--p-tp", "1", "--d-tp", "2", "--device", "cpu")


@pytest.mark.parametrize("args,message", [
    (("--listen", "127.0.0.2:5600"), "--listen is for a two-host run: add --role"),
    (("--role", "prefill"), "--role prefill needs --listen HOST:PORT or --etcd ENDPOINTS"),
    (("--role", "prefill", "--peer", "127.0.0.2:5600"), "--peer is for the decode side"),
    (("--role", "decode", "--listen", "127.0.0.2:5600"), "--listen is for the prefill side"),
    (("--role", "decode", "--peer", "127.0.0.2"), "expected HOST:PORT"),
    (("--role", "decode", "--peer", "127.0.0.2:0"), "port 0 is not in 1..65535"),
    (("--role", "decode", "--peer", "h:1", "--etcd", "http://127.0.0.1:2379"), "choose one way"),
    (("--role", "decode", "--etcd", "http://127.0.0.1:2379"), "--etcd needs --run-id"),
    (("--role", "decode", "--etcd", "http://x:1", "--run-id", "a/b"), "--run-id 'a/b'"),
    (("--role", "decode", "--peer", "h:1", "--run-id", "a"), "--run-id names a run in etcd"),
    (("--role", "decode", "--peer", "h:1", "--port", "5000"), "--host/--port place the one-host side channel"),
    (("--role", "prefill", "--listen", "192.0.2.1:5600"), "HOST must be an address of this machine"),
])
def test_two_host_user_errors(args, message):
    assert_user_error(run_cli(*SMALL, *args), message)


def test_a_listen_port_in_use():
    with socket.socket() as taken:
        taken.bind((P_HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("execute", *JAMBA, "--p-tp", "2", "--d-tp", "1", "--device", "cpu", "--role", "prefill",
                         "--listen", f"{P_HOST}:{port - 1}")
    assert_user_error(result, f"port {port} (P1's NIXL listener) is already in use")


def test_an_etcd_nobody_runs():
    port = free_port()
    result = run_cli(*SMALL, "--role", "decode", "--etcd", f"http://127.0.0.1:{port}", "--run-id", "r1")
    assert_user_error(result, f"--etcd: no etcd server answers (http://127.0.0.1:{port}:")
