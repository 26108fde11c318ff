"""Two-host ``execute``: the prefill and decode sides as separate ``mambaxfer`` processes that find
each other through NIXL's own metadata exchange (its listener on 127.0.0.2, or etcd on loopback),
compare their geometry, move real bytes and verify every one; refusals, faults and no orphans."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from cli_run import assert_user_error, run_cli
from mambaxfer_cli.execute.plan_source import cut_layers, plan_to_execute
from mambaxfer_cli.execute.rank import FAULT_ENV
from mambaxfer_cli.execute.tasks import RunSettings, build_tasks
from mambaxfer_cli.readers.model_source import load_model
from rank_processes import assert_no_rank_left, new_tag, tagged

P_HOST = "127.0.0.2"
JAMBA = ("--model", "jamba", "--layers", "8")                  # Mamba1 + attention, 8 KV-cache groups
GRANITE = ("--model", "granite-4.0-h-tiny", "--layers", "6")   # Mamba2 + attention


def free_port(count: int = 1) -> int:
    """A port with ``count`` free ports from it on (P rank r listens on port + r)."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("0.0.0.0", 0))
            port = sock.getsockname()[1]
        if port + count <= 65535 and all(_free(port + i) for i in range(count)):
            return port
    raise RuntimeError("no free ports")


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


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
    """Both sides of one run, each its own CLI process; one environment tag finds all of their ranks."""

    def __init__(self, common: tuple, prefill: tuple, decode: tuple, env: dict | None = None,
                 p_env: dict | None = None, d_env: dict | None = None, p_after: float = 0.0) -> None:
        self.tag = new_tag()
        base = {**os.environ, "COLUMNS": "160", **self.tag, **(env or {})}
        cmd = [sys.executable, "-m", "mambaxfer_cli", "execute", "--device", "cpu", "--iters", "1", *common]
        self.started = time.time()
        self.decode = subprocess.Popen([*cmd, "--role", "decode", *decode], env={**base, **(d_env or {})},
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(p_after)   # the decode side first, as a user may start them
        self.prefill = subprocess.Popen([*cmd, "--role", "prefill", *prefill], env={**base, **(p_env or {})},
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def _result(self, proc: subprocess.Popen, timeout: float) -> Side:
        out, err = proc.communicate(timeout=timeout)
        return Side(proc.returncode, out, err, time.time() - self.started)

    def results(self, timeout: float = 90) -> tuple[Side, Side]:
        try:
            return self._result(self.prefill, timeout), self._result(self.decode, timeout)
        finally:
            self.prefill.kill()
            self.decode.kill()

    def wait_for_ranks(self, count: int, within: float = 30) -> None:
        end = time.time() + within
        while len(tagged(self.tag)) < count and time.time() < end:
            time.sleep(0.1)
        assert len(tagged(self.tag)) >= count


def direct(p_tp: int) -> tuple[tuple, tuple]:
    port = free_port(p_tp)
    return ("--listen", f"{P_HOST}:{port}"), ("--peer", f"{P_HOST}:{port}")


def via_etcd(url: str) -> tuple[str, ...]:
    return ("--etcd", url, "--run-id", f"test-{os.getpid()}-{time.time_ns()}")


def assert_failed(side: Side, code: int, *fragments: str) -> None:
    """Exit ``code``, no traceback, nothing on stdout, the error as the last line on stderr."""
    assert side.code == code, (side.code, side.stdout, side.stderr)
    assert "Traceback" not in side.stderr and side.stdout == ""
    last = [line for line in side.stderr.splitlines() if line.strip()][-1]
    assert last.startswith("error: "), side.stderr
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


@pytest.mark.parametrize("model,p_tp,d_tp", [(JAMBA, 1, 2), (GRANITE, 2, 1)], ids=["1P2D-jamba", "2P1D-granite"])
def test_direct_two_sides_verify_every_byte(model, p_tp, d_tp):
    listen, peer = direct(p_tp)
    pair = Pair((*model, "--p-tp", str(p_tp), "--d-tp", str(d_tp), "--format", "json", "--timeout", "60"),
                listen, peer)
    prefill, decode = pair.results()
    assert_verified_run(prefill, decode, model, p_tp, d_tp)
    assert f"through NIXL listener{'s' if p_tp > 1 else ''} {P_HOST}:" in prefill.stderr
    assert_no_rank_left(pair.tag)


@pytest.mark.parametrize("model,p_tp,d_tp", [(GRANITE, 1, 2), (JAMBA, 2, 1)], ids=["1P2D-granite", "2P1D-jamba"])
def test_etcd_two_sides_verify_every_byte(etcd, model, p_tp, d_tp):
    found = via_etcd(etcd)
    pair = Pair((*model, "--p-tp", str(p_tp), "--d-tp", str(d_tp), "--format", "json", "--timeout", "60", *found),
                (), ())
    prefill, decode = pair.results()
    assert_verified_run(prefill, decode, model, p_tp, d_tp)
    assert f"through etcd {etcd}, run {found[-1]}" in decode.stderr
    assert_no_rank_left(pair.tag)


def test_decode_started_first_waits_for_prefill_and_prints_the_tables():
    """The order a user may start them in; the table output of both sides."""
    listen, peer = direct(1)
    tag = new_tag()
    common = ("execute", *JAMBA, "--p-tp", "1", "--d-tp", "2", "--device", "cpu", "--iters", "2", "--timeout", "60")
    env = {**os.environ, "COLUMNS": "160", **tag}
    decode = subprocess.Popen([sys.executable, "-m", "mambaxfer_cli", *common, "--role", "decode", *peer], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2)   # D asks P's listener again and again meanwhile
        prefill = run_cli(*common, "--role", "prefill", *listen, env=tag, timeout=90)
        out, err = decode.communicate(timeout=90)
    finally:
        decode.kill()
    assert decode.returncode == 0 and prefill.code == 0, (err, prefill.stderr)
    assert out.count("verified") == 2 and "decode side" in out
    assert "P rank" in prefill.stdout and "D0, D1" in prefill.stdout and "READ notifications" in prefill.stdout
    assert_no_rank_left(tag)


def test_etcd_entry_of_a_killed_prefill_does_not_hold_up_the_next_run(etcd):
    """A killed prefill side leaves its agent's entry in etcd; a decode side that loads it finds
    the agent gone and asks again, until the next prefill side of the run id publishes."""
    found = via_etcd(etcd)
    common = (*JAMBA, "--p-tp", "1", "--d-tp", "2", "--format", "json", "--timeout", "40", *found)
    first = Pair(common, (), (), d_env={FAULT_ENV: "D0:hang@prepare"})   # a run that gets as far as it can
    first.wait_for_ranks(5)
    time.sleep(3)
    first.prefill.send_signal(signal.SIGKILL)
    first.decode.send_signal(signal.SIGKILL)
    first.results()
    assert_no_rank_left(first.tag)
    pair = Pair(common, (), (), p_after=3)   # D loads the dead agent's entry meanwhile
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
    pair = Pair((*JAMBA, "--p-tp", "1", "--d-tp", "2", "--timeout", "30"), (*listen, *prefill_args),
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
    pair = Pair((*base, "--p-tp", "1", "--d-tp", "1", "--timeout", "30", *via_etcd(etcd)),
                prefill_args, decode_args)
    prefill, decode = pair.results()
    assert_failed(prefill, 2, f"prefill and decode disagree on {field}: prefill has")
    assert_failed(decode, 2, f"prefill and decode disagree on {field}: prefill has")
    assert_no_rank_left(pair.tag)


# --- faults: every wait ends within --timeout, exit 3, one clear line, no process of ours left

def test_a_peer_address_nobody_listens_on():
    _, peer = direct(1)
    tag = new_tag()
    started = time.time()
    result = run_cli("execute", *JAMBA, "--p-tp", "1", "--d-tp", "2", "--device", "cpu", "--timeout", "5",
                     "--role", "decode", *peer, env=tag, timeout=30)
    side = Side(result.code, result.stdout, result.stderr, time.time() - started)
    assert_failed(side, 3, "timed out waiting for P0's agent metadata", f"NIXL listener {peer[1]}")
    assert side.seconds < 5 + 4
    assert_no_rank_left(tag)


def test_prefill_killed_while_decode_waits():
    """P's ranks hang after registering (NIXL's listener still answers): D sends hello, waits for an
    answer, and learns P is gone from its pings when P's command is killed."""
    listen, peer = direct(1)
    pair = Pair((*JAMBA, "--p-tp", "1", "--d-tp", "2", "--timeout", "40"), listen, peer,
                p_env={FAULT_ENV: "P0:hang@serve"})
    pair.wait_for_ranks(5)   # two commands, three ranks
    time.sleep(2)
    pair.prefill.send_signal(signal.SIGKILL)
    killed = time.time()
    prefill, decode = pair.results()
    assert prefill.code == -signal.SIGKILL
    assert_failed(decode, 3, "P0 (mambaxfer-direct-P0) went away")
    assert decode.seconds - (killed - pair.started) < 5   # at once, not at the timeout
    assert_no_rank_left(pair.tag)


@pytest.mark.parametrize("how", ["rank dies", "command killed"])
def test_decode_killed_mid_transfer(how):
    listen, peer = direct(1)
    fault = "D1:die@transfer" if how == "rank dies" else "D1:hang@transfer"
    pair = Pair((*JAMBA, "--p-tp", "1", "--d-tp", "2", "--timeout", "40"), listen, peer, d_env={FAULT_ENV: fault})
    if how == "command killed":
        pair.wait_for_ranks(5)
        time.sleep(3)
        pair.decode.send_signal(signal.SIGKILL)
    prefill, decode = pair.results()
    assert_failed(prefill, 3, "D1 (mambaxfer-direct-D1) went away before its last READ completed")
    if how == "rank dies":
        assert_failed(decode, 3, "D1 died (exit code 70)")
    assert prefill.seconds < 20
    assert_no_rank_left(pair.tag)


@pytest.mark.parametrize("side", ["prefill", "decode"])
def test_ctrl_c_on_one_side_ends_both(side):
    """SIGINT to one command (its ranks busy after the handshake): it stops its ranks, and the
    other side learns from its pings that they are gone."""
    listen, peer = direct(1)
    faults = ({"p_env": {FAULT_ENV: "P0:hang@serve"}} if side == "prefill"
              else {"d_env": {FAULT_ENV: "D1:hang@transfer"}})
    pair = Pair((*JAMBA, "--p-tp", "1", "--d-tp", "2", "--timeout", "40"), listen, peer, **faults)
    pair.wait_for_ranks(5)
    time.sleep(3)
    (pair.prefill if side == "prefill" else pair.decode).send_signal(signal.SIGINT)
    prefill, decode = pair.results()
    interrupted, other = (prefill, decode) if side == "prefill" else (decode, prefill)
    assert interrupted.code != 0 and "Traceback" not in interrupted.stderr
    gone = "P0 (mambaxfer-direct-P0) went away" if side == "prefill" else "D1 (mambaxfer-direct-D1) went away"
    assert_failed(other, 3, gone)
    assert other.seconds < 20
    assert_no_rank_left(pair.tag)


def test_prefill_without_a_decode_side_times_out():
    listen, _ = direct(2)
    tag = new_tag()
    result = run_cli("execute", *GRANITE, "--p-tp", "2", "--d-tp", "1", "--device", "cpu", "--timeout", "4",
                     "--role", "prefill", *listen, env=tag, timeout=30)
    assert_failed(Side(result.code, result.stdout, result.stderr, 0), 3, "timed out waiting for the hello of D0")
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
