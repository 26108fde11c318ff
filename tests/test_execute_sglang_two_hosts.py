"""Two-host ``execute --engine sglang``: the prefill and decode sides as separate ``mambaxfer``
processes that find each other through NIXL's listener (on 127.0.0.2) or etcd (on loopback),
agree on the geometry, keep SGLang's rounds in step over NIXL notifications and verify every
byte on the decode side; a refusal on both sides, a side that goes away, and no orphans."""

from __future__ import annotations

import signal

import jsonschema
import pytest

from cli_run import assert_user_error, run_cli
from mambaxfer_cli.engines.sglang.commands.answers import load
from mambaxfer_cli.engines.sglang.plan import plan
from mambaxfer_cli.execute.faults import FAULT_ENV
from mambaxfer_cli.execute.tasks import cut_layers
from mambaxfer_cli.engines.sglang.transfer.run import D_SLOTS, MIN_ROUNDS, P_SLOTS, transfer
from mambaxfer_cli.schema import document_schema
from rank_processes import assert_no_rank_left, new_tag
from test_execute_two_hosts import P_HOST, Pair, Side, assert_failed, assert_only_our_lines, direct, via_etcd

QWEN = ("--engine", "sglang", "--model", "qwen3.5-0.8b", "--layers", "4")   # 3 GDN layers, 6 entries


def common(p_tp: int, d_tp: int, *more: str) -> tuple[str, ...]:
    return (*QWEN, "--p-tp", str(p_tp), "--d-tp", str(d_tp), "--timeout", "120", *more)


def planned(p_tp: int, d_tp: int):
    from mambaxfer_cli.cli.options import ModelArgs

    return transfer(plan(cut_layers(load(ModelArgs(model="qwen3.5-0.8b")), 4), p_tp, d_tp), "exact")


def assert_verified_run(prefill: Side, decode: Side, p_tp: int, d_tp: int) -> None:
    assert decode.code == 0, decode.stderr
    assert prefill.code == 0, prefill.stderr
    expected = planned(p_tp, d_tp)
    descriptors = expected.descriptors
    assert expected.attention_layers == 1    # the attention KV moves beside the state, as on one host
    d_doc, p_doc = decode.doc, prefill.doc
    for doc in (d_doc, p_doc):    # each side's document is the published one, with its role
        jsonschema.Draft202012Validator(document_schema("sglang-execute")).validate(doc)
    assert d_doc["role"] == "decode" and d_doc["verified"] and d_doc["bad_bytes"] == 0
    assert d_doc["rounds"] == MIN_ROUNDS and d_doc["attention"]["layers"] == p_doc["attention"]["layers"] == 1
    assert [d["d_rank"] for d in d_doc["decode"]] == list(range(d_tp))
    entry_bytes = sum(e.item_len for e in expected.decode_entries) * D_SLOTS
    for d in d_doc["decode"]:
        mine = [x for x in descriptors if x.d_rank == d["d_rank"]]
        assert d["ok"] and d["writers"] == sorted({x.p_rank for x in mine})
        assert d["checked_bytes"] == MIN_ROUNDS * entry_bytes      # every byte of every entry, every round
        assert d["bytes"] == sum(x.length for x in mine) > 0      # what its writers reported, the plan's
        assert d["descriptors"] == len(mine)
    assert p_doc["role"] == "prefill" and p_doc["decode"] == [] and p_doc["verified"] is True
    assert [p["p_rank"] for p in p_doc["prefill"]] == list(range(p_tp))
    for p in p_doc["prefill"]:
        mine = [x for x in descriptors if x.p_rank == p["p_rank"]]
        assert [w["d_rank"] for w in p["writes"]] == sorted({x.d_rank for x in mine})
        assert all(len(w["times_s"]) == MIN_ROUNDS for w in p["writes"])
        assert p["decode_verdicts"] == [{"d_rank": d, "ok": True, "bad_bytes": 0}
                                        for d in sorted({x.d_rank for x in mine})]
    assert p_doc["total_bytes"] == d_doc["total_bytes"] == sum(x.length for x in descriptors)
    assert P_SLOTS == p_doc["slots"]["prefill"]["slots"]


pytestmark = pytest.mark.usefixtures("nixl")


def test_direct_p_tp1_d_tp2_verifies_every_byte():
    listen, peer = direct(1)
    pair = Pair(common(1, 2, "--format", "json"), listen, peer)
    prefill, decode = pair.results()
    assert_verified_run(prefill, decode, 1, 2)
    assert f"prefill side: P0 wait for the decode side through NIXL listener {P_HOST}:" in prefill.stderr
    assert f"decode side: D0..D1 receive the prefill side's WRITEs through NIXL listener {P_HOST}:" in decode.stderr
    assert_no_rank_left(pair.tag)


@pytest.mark.parametrize("p_tp,d_tp", [(1, 2), (2, 1)], ids=["P_TP_1-D_TP_2", "P_TP_2-D_TP_1"])
def test_etcd_verifies_every_byte(etcd, p_tp, d_tp):
    found = via_etcd(etcd)
    pair = Pair(common(p_tp, d_tp, "--format", "json", *found), (), ())
    prefill, decode = pair.results()
    assert_verified_run(prefill, decode, p_tp, d_tp)
    assert f"through etcd {etcd}, run {found[-1]}" in decode.stderr
    assert_no_rank_left(pair.tag)


def test_decode_started_first_waits_and_both_print_their_tables():
    """The order a user may start them in; each side's table."""
    listen, peer = direct(2)
    pair = Pair(common(2, 1), listen, peer, start_prefill=False)
    pair.wait_decode("D0", "waiting for P0's agent metadata")   # D asks P's listener again and again
    pair.start_prefill()
    prefill, decode = pair.results()
    assert decode.code == 0 and prefill.code == 0, (decode.stderr, prefill.stderr)
    assert "decode side" in decode.stdout and "P0, P1" in decode.stdout and decode.stdout.count("verified") == 1
    assert "prefill side of qwen3.5-0.8b" in prefill.stdout and prefill.stdout.count("verified") == 2
    assert "P0 -> D0" in prefill.stdout and "P1 -> D0" in prefill.stdout and "checked every byte" in prefill.stdout
    assert_no_rank_left(pair.tag)


def test_sglang_semantics_bad_bytes_are_told_on_both_sides():
    """SGLang's own writes on Nemotron-H at 1P2D: the decode side measures what check predicts, and
    the prefill side reports what each D rank answered; both exit 1."""
    listen, peer = direct(1)
    model = ("--engine", "sglang", "--model", "nemotron-h-8b", "--layers", "4", "--semantics", "sglang")
    pair = Pair((*model, "--p-tp", "1", "--d-tp", "2", "--timeout", "120", "--format", "json"), listen, peer)
    prefill, decode = pair.results()
    assert decode.code == 1 and prefill.code == 1, (decode.stderr, prefill.stderr)
    d_doc, p_doc = decode.doc, prefill.doc
    assert not d_doc["verified"] and d_doc["bad_bytes"] == d_doc["predicted_bad_bytes"] > 0
    assert p_doc["verified"] is False and p_doc["bad_bytes"] == d_doc["bad_bytes"]
    assert [v["bad_bytes"] for v in p_doc["prefill"][0]["decode_verdicts"]] == \
        [d["bad_bytes"] for d in d_doc["decode"]]
    assert_no_rank_left(pair.tag)


def test_etcd_entries_of_a_killed_run_do_not_hold_up_the_next(etcd):
    """A killed run leaves its agents' entries in etcd; the next run of the same id finds the dead
    prefill agent, says hello in vain, forgets it and asks again until the new one publishes."""
    found = via_etcd(etcd)
    first = Pair(common(1, 2, "--format", "json", *found), (), (), d_env={FAULT_ENV: "D0:hang@prepare"})
    first.wait_decode("D1", "waiting for every D rank to be welcomed")
    first.prefill.send_signal(signal.SIGKILL)
    first.decode.send_signal(signal.SIGKILL)
    first.results()
    assert_no_rank_left(first.tag)
    pair = Pair(common(1, 2, "--format", "json", *found), (), (), start_prefill=False)
    for rank in ("D0", "D1"):
        pair.wait_decode(rank, "waiting for P0's agent metadata")
    pair.start_prefill()
    prefill, decode = pair.results()
    assert_verified_run(prefill, decode, 1, 2)
    assert_no_rank_left(pair.tag)


# --- refusals: the prefill side compares what each D rank publishes with its own plan

@pytest.mark.parametrize("prefill_args,decode_args,message", [
    (("--d-tp", "2"), ("--d-tp", "1"), "prefill and decode disagree on tp.decode: prefill has 2, decode has 1"),
    (("--d-tp", "1", "--iters", "4"), ("--d-tp", "1"), "prefill and decode disagree on rounds: prefill has 4, "
                                                       "decode has 3"),
], ids=["d-tp", "rounds"])
def test_direct_mismatch_is_refused_on_both_sides(prefill_args, decode_args, message):
    listen, peer = direct(1)
    base = (*QWEN, "--p-tp", "1", "--timeout", "120")
    pair = Pair(base, (*listen, *prefill_args), (*peer, *decode_args))
    prefill, decode = pair.results()
    assert_failed(prefill, 2, "P0: refused D0", message)
    assert_failed(decode, 2, "P0 refused this decode run", message)
    assert "verified" not in decode.stdout + decode.stderr
    assert_no_rank_left(pair.tag)


def test_etcd_mismatch_is_refused_on_both_sides(etcd):
    pair = Pair(common(1, 1, *via_etcd(etcd)), (), ("--layers", "8"))     # the decode side's --layers wins
    prefill, decode = pair.results()
    assert_failed(prefill, 2, "prefill and decode disagree on model.ssm_layers: prefill has 3, decode has 6")
    assert_failed(decode, 2, "prefill and decode disagree on model.ssm_layers: prefill has 3, decode has 6")
    assert_no_rank_left(pair.tag)


# --- a side that goes away ends the other at once (pings), with one line; no process left

def test_prefill_killed_while_decode_waits_for_its_answer():
    listen, peer = direct(1)
    pair = Pair(common(1, 2), listen, peer, p_env={FAULT_ENV: "P0:hang@serve"})
    for rank in ("D0", "D1"):
        pair.wait_decode(rank, "waiting for P0's answer")
    pair.prefill.send_signal(signal.SIGKILL)
    prefill, decode = pair.results()
    assert prefill.code == -signal.SIGKILL
    assert_failed(decode, 3, "P0 (mambaxfer-direct-P0) went away")   # from its pings, not the 120 s timeout
    assert_no_rank_left(pair.tag)


@pytest.mark.parametrize("how", ["rank dies", "killed", "ctrl-c"])
def test_decode_gone_between_rounds_ends_prefill(how):
    """D1 dies, or hangs before it says it is ready for round 1 (D0 waits for P0's WRITE, P0 for
    D1) and its command is killed or interrupted."""
    listen, peer = direct(1)
    fault = "D1:die@transfer" if how == "rank dies" else "D1:hang@transfer"
    pair = Pair(common(1, 2), listen, peer, d_env={FAULT_ENV: fault})
    if how != "rank dies":
        pair.wait_decode("D0", "waiting for the WRITE notifications of P0")
        pair.wait_prefill("P0", "waiting for D1 to poison for round 1")
        pair.decode.send_signal(signal.SIGKILL if how == "killed" else signal.SIGINT)
    prefill, decode = pair.results()
    if how == "rank dies":
        assert_failed(decode, 3, "D1 died (exit code 70)")
    elif how == "killed":
        assert decode.code == -signal.SIGKILL
    else:
        assert decode.code == 130 and decode.stdout == ""
        assert_only_our_lines(decode, "interrupted")
    assert_failed(prefill, 3, "went away")
    assert "(mambaxfer-direct-D" in prefill.stderr
    assert_no_rank_left(pair.tag)


def test_ctrl_c_on_prefill_mid_run_ends_decode():
    listen, peer = direct(1)
    pair = Pair(common(1, 2), listen, peer, d_env={FAULT_ENV: "D1:hang@transfer"})
    pair.wait_prefill("P0", "waiting for D1 to poison for round 1")
    pair.prefill.send_signal(signal.SIGINT)
    prefill, decode = pair.results()
    assert prefill.code == 130 and prefill.stdout == ""
    assert_only_our_lines(prefill, "interrupted")
    assert_failed(decode, 3, "P0 (mambaxfer-direct-P0) went away")   # D0 learns it from its pings
    assert_no_rank_left(pair.tag)


def test_prefill_without_a_decode_side_times_out():
    """Before any D rank said hello there is nobody to ping: --timeout ends the wait, saying what for."""
    listen, _ = direct(1)
    tag = new_tag()
    result = run_cli("execute", *common(1, 2)[:-2], "--device", "cpu", "--timeout", "4", "--role", "prefill",
                     *listen, env=tag, timeout=300)
    assert_failed(Side(result.code, result.stdout, result.stderr, 0), 3, "timed out: nothing happened for 4s",
                  "P0 serving (waiting for the hello of D0, D1)")
    assert_no_rank_left(tag)


# --- user errors, before any rank starts --------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (("--role", "decode"), "--role decode needs --peer HOST:PORT or --etcd ENDPOINTS"),
    (("--role", "prefill", "--peer", "127.0.0.2:5600"), "--peer is for the decode side"),
    (("--peer", "127.0.0.2:5600"), "--peer is for a two-host run: add --role"),
    (("--role", "decode", "--etcd", "http://127.0.0.1:2379"), "--etcd needs --run-id"),
])
def test_two_host_user_errors(args, message):
    assert_user_error(run_cli("execute", *common(1, 2), "--device", "cpu", *args), message)


def test_decode_gone_mid_write_is_named_on_prefill():
    """D1 dies once it said it is ready, while P0's WRITEs into it run: P0's line says D1 went
    away, with NIXL's error as its detail, not NIXL's error alone."""
    listen, peer = direct(1)
    pair = Pair(common(1, 2), listen, peer, d_env={FAULT_ENV: "D1:die@receive"})
    prefill, decode = pair.results()
    assert_failed(decode, 3, "D1 died (exit code 70)")
    assert_failed(prefill, 3, "P0: D1 (mambaxfer-direct-D1) went away", "; NIXL: nixl")
    assert_no_rank_left(pair.tag)
