"""Which pairings check proves, the verdicts and documents it returns, and properties over random models."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings, strategies as st

from mambaxfer_cli.engines.vllm.proof.check import (
    Pairing, Target, check_pairing, pairings_up_to, parse_pairs, plan_pairing, run_check,
    targets_for,
)
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.planning.model import ModelSpec, Variant
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.engines.vllm.plan import build_plan
from mambaxfer_cli.planning.reads import tp_ratio
from mambaxfer_cli.engines.vllm.proof.simulate import Patterns, simulate
from cli_run import vllm_presets
from plan_options import check_options
from strategies import pairings


def test_parse_pairs_keeps_order_and_drops_repeats():
    assert parse_pairs("1:4, 4:1,2:3,1:4") == (Pairing(1, 4), Pairing(4, 1), Pairing(2, 3))
    assert str(Pairing(2, 3)) == "2:3"


@pytest.mark.parametrize("text,fragment", [
    ("1-2", "'1-2' is not a P:D pair"), ("1:2:3", "'1:2:3' is not a P:D pair"), ("a:b", "'a:b'"),
    ("0:2", "must be positive"), ("2:-1", "must be positive"), (" , ", "give at least one P:D pair"),
])
def test_parse_pairs_rejects_bad_syntax(text, fragment):
    with pytest.raises(UserError, match="--pairs") as info:
        parse_pairs(text)
    assert fragment in str(info.value)


def test_max_tp_needs_both_the_ssm_and_the_attention_layout():
    # Granite: 48 heads and one replicated group allow 3 and 6, its 4 KV heads do not; 8 would
    # shard the layout, but vLLM does not start it (12 attention heads, verify_with_parallel_config).
    granite = pairings_up_to(load_model("granite-4.0-h-tiny"), 8, "exact")
    assert {p.p_tp for p in granite} == {1, 2, 4} and len(granite) == 9
    mamba = pairings_up_to(load_model("mamba-130m"), 8, "exact")      # no attention
    assert {p.d_tp for p in mamba} == {1, 2, 3, 4, 6, 8} and len(mamba) == 36


def test_max_tp_includes_non_multiples_only_under_exact_semantics():
    model = load_model("mamba-130m")
    exact = pairings_up_to(model, 4, "exact")
    assert len(exact) == 16 and Pairing(2, 3) in exact and Pairing(3, 4) in exact
    vllm = pairings_up_to(model, 4, "vllm")
    assert Pairing(2, 3) not in vllm and Pairing(3, 1) in vllm and Pairing(2, 4) in vllm
    assert all(tp_ratio(p.p_tp, p.d_tp) is not None for p in vllm)
    with pytest.raises(UserError, match="--max-tp must be >= 1, got 0"):
        pairings_up_to(model, 0, "exact")


def test_targets_need_pairs_or_max_tp_not_both():
    model = load_model("jamba")
    with pytest.raises(UserError, match="either --pairs or --max-tp"):
        targets_for([model], "1:2", 4, "exact")
    with pytest.raises(UserError, match="--max-tp must be >= 1, got -3"):
        targets_for([model], None, -3, "exact")
    with pytest.raises(UserError, match="--max-tp 1000000000 is larger than any deployment's TP size; at most 256"):
        targets_for([model], None, 10**9, "exact")   # an unbounded search would never end
    (default,) = targets_for([model], None, None, "exact")
    assert len(default.pairings) == 16 and not default.listed        # TP 1, 2, 4, 8 both ways
    (listed,) = targets_for([model], "4:1", None, "exact")
    assert listed.pairings == (Pairing(4, 1),) and listed.listed


def test_a_listed_pairing_that_cannot_be_planned_is_a_user_error_and_an_enumerated_one_a_skip():
    model = load_model("jamba")                      # intermediate 8192 and 8 KV heads: TP 3 does not exist
    with pytest.raises(UserError, match=r"--pairs 3:1: vLLM does not start a TP-3 engine of jamba: "
                                          r"32 attention heads do not divide by TP 3"):
        plan_pairing(model, Pairing(3, 1), check_options(), listed=True)
    skipped = check_pairing(model, Pairing(3, 1), check_options(), listed=False)
    assert skipped.verdict == "skip" and "TP 3" in skipped.reason
    assert skipped.explanation() == [f"skipped: {skipped.reason}"]
    with pytest.raises(UserError, match="vLLM needs one TP size to divide the other"):
        check_pairing(load_model("mamba-130m"), Pairing(2, 3), check_options(semantics="vllm"))


def test_user_errors_come_before_any_simulation():
    seen = []
    targets = [Target(load_model("mamba-130m"), (Pairing(1, 1),), listed=True),
               Target(load_model("jamba"), (Pairing(1, 3),), listed=True)]
    with pytest.raises(UserError, match="--pairs 1:3"):
        run_check(targets, check_options(), on_result=seen.append)
    assert seen == []


def test_report_counts_verdicts_and_serialises():
    targets = targets_for([load_model("granite-4.0-h-tiny")], "1:1,1:2,2:1", None, "vllm")
    started, seen = [], []
    report = run_check(targets, check_options(semantics="vllm"), started.append, seen.append)
    assert started == [3] and len(seen) == 3
    assert [r.verdict for r in report.results] == ["pass", "fail", "fail"]
    assert not report.ok and report.exit_code == 1
    doc = report.to_dict()
    assert doc["schema"] == "mambaxfer.check/v1" and doc["ok"] is False
    assert doc["summary"] == {"pairings": 3, "passed": 1, "failed": 2, "refused": 0, "skipped": 0,
                              "seconds": doc["summary"]["seconds"]}
    good, bad = doc["results"][0], doc["results"][1]
    assert good["first_wrong_byte"] is None and good["wrong_bytes"] == 0 and good["explanation"] == []
    assert good["bytes"] == good["bytes_verified"] > 0
    assert bad["first_wrong_byte"]["reason"] == "temporal bytes read as C"
    assert bad["warnings"] == ["vllm-replicated-groups"]
    assert "D1 B[0:128] <- P0 C[0:128]" in bad["misreads"]
    lines = report.results[1].explanation()
    assert lines[0].startswith("first wrong byte: D0 tensor 0 SSM block")
    assert any("D1 B: C read as B" in line for line in lines)
    # 2P1D: D takes half of the group from each P rank instead of the whole group from one.
    two_to_one = report.results[2].simulation
    assert {(d.region, d.first.reason.split(" read as ")[-1]) for d in two_to_one.damage} >= {("B", "channel 64")}


def test_exact_plans_of_every_preset_pass_and_vllm_fails_exactly_where_it_warns():
    options = {"exact": check_options(), "vllm": check_options(semantics="vllm")}
    for name in vllm_presets():
        model, patterns = load_model(name), Patterns()
        for pairing in pairings_up_to(model, 2, "vllm"):
            exact = check_pairing(model, pairing, options["exact"], patterns)
            assert exact.verdict == "pass", exact.explanation()
            plan = build_plan(model, pairing.p_tp, pairing.d_tp, options["vllm"])
            warned = any(w.code == "vllm-replicated-groups" for w in plan.warnings)
            assert simulate(plan, patterns).ok is not warned, (name, pairing)


# --- properties ---------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(pairings(max_tp=4, attention=True), st.booleans(), st.integers(1, 3), st.integers(0, 1000))
def test_exact_plans_verify_byte_by_byte_for_random_models(case, coalesced, blocks, seed):
    model, p_tp, d_tp = case
    options = check_options(coalesce=coalesced, request_blocks=blocks, seed=seed)
    result = check_pairing(model, Pairing(p_tp, d_tp), options)
    assert result.verdict == "pass", result.explanation()
    assert result.bytes == result.simulation.bytes_verified


@settings(max_examples=40, deadline=None)
@given(pairings(max_tp=4, attention=True), st.data())
def test_any_changed_remote_id_is_caught(case, data):
    model, p_tp, d_tp = case
    plan = build_plan(model, p_tp, d_tp, check_options(request_blocks=2))
    from dataclasses import replace

    reads = plan.descriptors.reads
    index = data.draw(st.integers(0, len(reads) - 1))
    dread = reads[index]
    position = data.draw(st.integers(0, len(dread.remote_ids) - 1))
    ids = array("q", dread.remote_ids)
    new = data.draw(st.integers(0, dread.remote.length - 1).filter(lambda i: i != ids[position]))
    ids[position] = new
    mutated = replace(dread, remote_ids=ids)
    plan = replace(plan, descriptors=replace(plan.descriptors,
                                             reads=reads[:index] + (mutated,) + reads[index + 1:]))
    assert not simulate(plan).ok


def test_a_pairing_vllm_refuses_is_still_planned_and_proved_exactly():
    # n_groups == 1 replicated: D TP 1's B region (2 bytes) cannot be split in 3 parts by vLLM.
    model = ModelSpec("odd", "test", Variant("mamba2"), {"intermediate_size": 3, "d_state": 1, "n_groups": 1,
                                                      "num_heads": 3, "head_dim": 1},
                      ("ssm",), conv_kernel=2, num_spec=0, conv_dtype="bfloat16", ssm_dtype="bfloat16")
    exact = check_pairing(model, Pairing(3, 1), check_options())
    assert exact.verdict == "pass" and exact.warnings == ("vllm-refuses",)
    skipped = check_pairing(model, Pairing(3, 1), check_options(semantics="vllm"), listed=False)
    assert skipped.verdict == "skip" and "cannot split region 'B'" in skipped.reason
