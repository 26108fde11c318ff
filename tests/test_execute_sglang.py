"""``mambaxfer execute --engine sglang``: SGLang's transfer with real NIXL WRITEs (DRAM over UCX)
between real rank processes, every byte of every decode entry checked: the exact writes land
every byte, SGLang's own land the bytes ``check --engine sglang`` says they get wrong, no more and
no fewer; faults, signals and bad options end as they do for vLLM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from cli_run import assert_refused, assert_user_error, messages, run_cli, run_json
from mambaxfer_cli.engines.sglang.plan import plan
from mambaxfer_cli.engines.sglang.check import check_pairing
from mambaxfer_cli.engines.sglang.kv import KV_FIELDS
from mambaxfer_cli.execute.faults import FAULT_ENV
from mambaxfer_cli.execute.tasks import cut_layers
from mambaxfer_cli.engines.sglang.transfer.run import D_SLOTS, MIN_ROUNDS, chosen_writes, transfer
from mambaxfer_cli.readers.model_source import load_model
from rank_processes import as_a_shell_starts, assert_fault_fails_the_run, assert_no_rank_left, new_tag, tagged


def execute_json(*args: str, env: dict | None = None) -> tuple[int, dict]:
    return run_json("execute", "--engine", "sglang", "--device", "cpu", "--format", "json", "--timeout", "90",
                    *args, env=env)


def assert_counts_match_check(doc: dict, model: str, p_tp: int, d_tp: int, layers: int | None) -> None:
    """Per D rank and field: the bytes the real transfer got wrong, missing and beyond the item
    are check's simulated ones, times the layers."""
    spec = cut_layers(load_model(model), layers)
    checked = check_pairing(spec, p_tp, d_tp)
    ssm_layers = checked.plan.verdict.ssm_layers
    expected = {(o.d_rank, o.field): (o.wrong * ssm_layers, o.missing * ssm_layers, o.beyond * ssm_layers)
                for o in checked.sglang}
    measured = {(d["d_rank"], f["field"]): (f["wrong"], f["missing"], f["beyond"])
                for d in doc["decode"] for f in d["fields"] if f["field"] not in KV_FIELDS}
    assert measured == expected
    # SGLang's head slices land every KV head right (check: no KV head wrong).
    assert checked.plan.verdict.heads_wrong == 0
    assert all(f["wrong"] == f["missing"] == f["beyond"] == 0
               for d in doc["decode"] for f in d["fields"] if f["field"] in KV_FIELDS)
    assert doc["bad_bytes"] == doc["predicted_bad_bytes"] == checked.wrong()


@pytest.mark.usefixtures("nixl")
def test_exact_writes_verify_every_byte_of_qwen35_at_1p2d():
    """The issue's command: every byte of every decode entry, every round, is what it must be."""
    env = new_tag()
    code, doc = execute_json("--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2", "--semantics", "exact", env=env)
    assert code == 0 and doc["verified"] and doc["bad_bytes"] == 0, doc
    assert (doc["engine"], doc["semantics"], doc["rounds"]) == ("sglang", "exact", MIN_ROUNDS)
    planned = plan(load_model("qwen3.5-0.8b"), 1, 2)
    moved = transfer(chosen_writes(planned, "exact"), "exact")
    exact = moved.descriptors
    assert exact and len(moved.decode_entries) == len(planned.decode_entries) + 2 * 6   # K and V of 6 layers
    for d in doc["decode"]:
        mine = [x for x in exact if x.d_rank == d["d_rank"]]
        assert d["descriptors"] == len(mine) and 1 <= d["descriptors_merged"] <= len(mine)
        assert d["bytes"] == sum(x.length for x in mine)
        assert d["entries"] == len(moved.decode_entries)
        slot_bytes = sum(e.item_len for e in moved.decode_entries)
        assert d["checked_bytes"] == MIN_ROUNDS * D_SLOTS * slot_bytes
        assert all(f["wrong"] == f["missing"] == f["beyond"] == 0 for f in d["fields"])
        assert d["first_bad_byte"] is None and d["gb_per_s"] > 0
    assert [p["p_rank"] for p in doc["prefill"]] == [0]
    assert all(len(w["times_s"]) == MIN_ROUNDS for w in doc["prefill"][0]["writes"])
    assert_no_rank_left(env)


@pytest.mark.usefixtures("nixl")
def test_sglang_writes_corrupt_nemotron_h_exactly_as_check_predicts():
    """The issue's Mamba2 case: the real WRITEs get check's 811,008 conv bytes wrong, exit 1."""
    result = run_cli("execute", "--engine", "sglang", "--model", "nemotron-h-8b", "--p-tp", "1", "--d-tp", "2",
                     "--semantics", "sglang", "--device", "cpu", "--timeout", "90", timeout=300)
    assert result.code == 1, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "verified" not in out and "D0: 147456 bad bytes over 24 layers (conv: 147456 wrong)" in out
    assert "D1: 663552 bad bytes over 24 layers (conv: 663552 wrong)" in out
    assert "= B channel 0 byte 0: wrong" in out
    assert "measured 811,008 bad bytes for one request, all layers; check --engine sglang predicts 811,008: " \
           "the same" in out
    checked = run_cli("check", "--engine", "sglang", "--model", "nemotron-h-8b", "--pairs", "1:2", "--format", "json")
    assert json.loads(checked.stdout)["pairings"][0]["bytes_wrong"]["conv"] == 811008


@pytest.mark.usefixtures("nixl")
@pytest.mark.parametrize("p_tp,d_tp", [(1, 2), (2, 1)], ids=["P_TP_1-D_TP_2", "P_TP_2-D_TP_1"])
def test_wrong_bytes_equal_checks_per_rank_and_field(p_tp, d_tp):
    code, doc = execute_json("--model", "nemotron-h-8b", "--layers", "6", "--p-tp", str(p_tp), "--d-tp", str(d_tp),
                             "--semantics", "sglang", "--iters", "1")
    assert code == 1 and not doc["verified"]
    assert_counts_match_check(doc, "nemotron-h-8b", p_tp, d_tp, 6)
    first = doc["decode"][0]["first_bad_byte"]
    assert first["field"] == "conv" and first["kind"] == "wrong" and first["expected"] != first["found"]


@pytest.mark.usefixtures("nixl")
@pytest.mark.parametrize("model,layers", [("nemotron-h-8b", 6), ("qwen3.5-0.8b", 4)])
def test_p_larger_than_d_exact_writes_verify(model, layers):
    """P TP 2 -> D TP 1: two P ranks WRITE into one D rank's slot, each its half."""
    code, doc = execute_json("--model", model, "--layers", str(layers), "--p-tp", "2", "--d-tp", "1", "--iters", "1",
                             "--semantics", "exact")
    assert code == 0 and doc["verified"], doc
    assert doc["decode"][0]["writers"] == [0, 1]
    assert [w["d_rank"] for p in doc["prefill"] for w in p["writes"]] == [0, 0]


@pytest.mark.usefixtures("nixl")
def test_equal_tp_sglang_writes_are_right_when_check_says_so():
    code, doc = execute_json("--model", "nemotron-h-8b", "--layers", "4", "--p-tp", "2", "--d-tp", "2",
                             "--semantics", "sglang", "--iters", "1")
    assert code == 0 and doc["verified"] and doc["predicted_bad_bytes"] == 0


# --- faults, signals and bad options: as for vLLM ------------------------------------------------

SMALL = ("execute", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--layers", "4", "--device", "cpu",
         "--iters", "1")


@pytest.mark.usefixtures("nixl")
@pytest.mark.parametrize("fault,p_tp,d_tp,message", [
    ("P0:die@transfer", 1, 2, "P0 died (exit code 70) while"),
    ("D1:die@serve", 1, 2, "D1 died (exit code 70) while serving"),
    ("P1:die@fill", 2, 1, "P1 died (exit code 70) while filling"),
])
def test_a_killed_rank(fault, p_tp, d_tp, message):
    assert_fault_fails_the_run(fault, (*SMALL, "--p-tp", str(p_tp), "--d-tp", str(d_tp), "--timeout", "120"),
                               message)


@pytest.mark.usefixtures("nixl")
def test_a_decode_rank_that_never_answers_times_out():
    assert_fault_fails_the_run("D0:hang@serve", (*SMALL, "--p-tp", "1", "--d-tp", "2", "--timeout", "5"),
                               "timed out: D0 serving (answering P0) made no progress for 5s (--timeout)",
                               "waiting for D0's side channel 127.0.0.1:")


@pytest.mark.usefixtures("nixl")
def test_ctrl_c_leaves_one_line_and_no_process():
    env = {**os.environ, **new_tag(), FAULT_ENV: "D0:hang@serve", "COLUMNS": "160"}
    proc = subprocess.Popen([sys.executable, "-m", "mambaxfer_cli", *SMALL, "--p-tp", "1", "--d-tp", "2",
                             "--timeout", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, preexec_fn=as_a_shell_starts)
    try:
        end = time.time() + 60
        while len(tagged(env)) < 4 and time.time() < end:   # the CLI and its three ranks
            time.sleep(0.2)
        assert len(tagged(env)) >= 4, "the ranks never started"
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, (proc.returncode, err)
    assert out == "" and err.strip().splitlines() == ["interrupted"], err
    assert_no_rank_left(env)


@pytest.mark.parametrize("args,fragments", [
    (("--semantics", "vllm"), ("'vllm' is not one of 'exact', 'sglang'",)),
    (("--blocks", "8"), ("--blocks: it applies to vLLM's block reads",)),
    (("--request-blocks", "2", "--seed", "3"), ("--request-blocks, --seed: these apply",)),
    (("--vllm-version", "0.34"), ("--vllm-version: vLLM's option",)),
    (("--port", "70000"), ("--port 70000: not a port number",)),
    (("--iters", "0"), ("--iters",)),
])
def test_bad_options_are_one_line(args, fragments):
    result = run_cli("execute", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2",
                     "--device", "cpu", *args)
    assert_user_error(result, *fragments)
    assert len(messages(result.stderr)) == 1 and result.stdout == ""


def test_a_model_sglang_does_not_serve_and_a_pairing_it_refuses():
    jamba = run_cli("execute", "--engine", "sglang", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--device",
                    "cpu")
    assert_refused(jamba, "SGLang 0.5.23 has no Jamba model file")
    exact = run_cli("execute", "--engine", "sglang", "--model", "mamba-130m", "--p-tp", "1", "--d-tp", "1",
                    "--device", "cpu", "--layers", "0")
    assert_user_error(exact, "--layers must be >= 1")
    failing = run_cli("execute", "--engine", "sglang", "--model", "mamba-130m", "--p-tp", "3", "--d-tp", "2",
                      "--semantics", "sglang", "--device", "cpu")
    assert_refused(failing, "SGLang 0.5.23 fails every request of mamba-130m at P TP 3 → D TP 2",
                      "so no state moves; --semantics exact moves the bytes")


def test_vllm_commands_refuse_sglang_semantics():
    result = run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--semantics", "sglang")
    assert_user_error(result, "'sglang' is not one of 'exact', 'vllm'")
