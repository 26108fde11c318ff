"""``mambaxfer execute`` end to end: real NIXL READs (DRAM over UCX) between real rank processes,
every byte verified, for a Mamba1, a Mamba2 with replicated groups and a GDN model."""

from __future__ import annotations

import json

import jsonschema
import pytest

from cli_run import run_cli
from mambaxfer_cli.engines.vllm.transfer.plan_source import plan_to_execute
from mambaxfer_cli.execute.tasks import cut_layers
from mambaxfer_cli.engines.vllm.transfer.tasks import build_tasks
from mambaxfer_cli.execute.tasks import RunSettings
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.engines.vllm.proof.simulate import simulate
from mambaxfer_cli.schema import document_schema
from rank_processes import assert_no_rank_left, new_tag

pytestmark = pytest.mark.usefixtures("nixl")

# A cut of each model keeps one KV-cache tensor (several groups, attention included), so a
# pairing of up to 6 ranks runs in a few seconds on two cores.
MODELS = {"jamba": 8, "granite-4.0-h-tiny": 6, "qwen3.5-0.8b": 4}
PAIRINGS = [(1, 1), (1, 4), (4, 1), (2, 4), (4, 2)]


def execute_json(*args: str, env: dict | None = None) -> tuple[int, dict]:
    result = run_cli("execute", "--device", "cpu", "--format", "json", "--timeout", "90", *args, env=env)
    assert result.code in (0, 1), result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result.code, json.loads(result.stdout)


def local_plan(model: str, p_tp: int, d_tp: int, layers: int | None, semantics: str = "exact"):
    spec = cut_layers(load_model(model), layers)
    return plan_to_execute(spec, p_tp, d_tp, semantics=semantics, coalesce=False, blocks=None,
                           request_blocks=2, seed=0)


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("p_tp,d_tp", PAIRINGS, ids=[f"{p}P{d}D" for p, d in PAIRINGS])
def test_real_transfer_verifies_every_byte(model, p_tp, d_tp):
    env = new_tag()
    code, doc = execute_json("--model", model, "--p-tp", str(p_tp), "--d-tp", str(d_tp), "--semantics", "exact",
                             "--layers", str(MODELS[model]), "--iters", "1", env=env)
    assert code == 0 and doc["verified"], doc
    plan = local_plan(model, p_tp, d_tp, MODELS[model])
    _, decode = build_tasks(plan, RunSettings("t", "cpu", 0, "127.0.0.1", 0, 1))
    assert [d["d_rank"] for d in doc["decode"]] == list(range(d_tp))
    for d, task in zip(doc["decode"], decode):
        # The plan's reads, its IDs, and every byte of D's registered memory.
        assert d["sources"] == list(task.sources)
        assert d["descriptors_posted"] == sum(len(r.local_ids) for r in task.reads)
        assert 1 <= d["descriptors_merged"] <= d["descriptors_posted"]
        assert d["telemetry_bytes"] == d["bytes"] > 0
        assert d["verdict"] == {**d["verdict"], "ok": True, "wrong_bytes": 0,
                                "checked_bytes": task.memory.total_bytes}
        assert d["gb_per_s"] > 0
    assert sorted(p["p_rank"] for p in doc["prefill"]) == list(range(p_tp))
    assert_no_rank_left(env)


def test_whole_mamba1_model_without_attention():
    code, doc = execute_json("--model", "mamba-130m", "--p-tp", "2", "--d-tp", "4", "--iters", "2", "--semantics",
                             "exact")
    assert code == 0 and doc["verified"]
    assert all(len(d["times_s"]) == 2 for d in doc["decode"])
    # vLLM's connector cannot pair a model without attention: the run says so.
    assert doc["vllm"]["accepts"] is False
    assert [r["code"] for r in doc["vllm"]["refusals"]] == ["no-attention"]
    jsonschema.Draft202012Validator(document_schema("execute")).validate(doc)


def test_a_pairing_vllm_refuses_says_so_before_the_reads_it_moved():
    result = run_cli("execute", "--model", "mamba-130m", "--p-tp", "1", "--d-tp", "2", "--semantics", "vllm",
                     "--device", "cpu", "--iters", "1", "--layers", "2", timeout=120)
    assert result.code == 0, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert out.startswith("vLLM 0.34 refuses this pairing at handshake: vLLM's NIXL connector cannot transfer")
    assert "a deployment moves nothing; the run moved the reads vLLM's rules would post" in out
    accepted = run_cli("execute", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--device", "cpu",
                       "--iters", "1", "--layers", "8", timeout=120)
    assert accepted.code == 0 and "refuses" not in accepted.stdout


def test_p_larger_than_d_reads_through_split_lists():
    code, doc = execute_json("--model", "jamba", "--layers", "8", "--p-tp", "4", "--d-tp", "2", "--iters", "1",
                             "--semantics", "exact")
    assert code == 0
    assert doc["decode"][0]["local_lists"] == ["split:0", "split:1"]
    assert doc["decode"][0]["sources"] == [0, 1] and doc["decode"][1]["sources"] == [2, 3]


def test_vllm_semantics_on_replicated_groups_corrupts_state_as_check_predicts():
    """The issue's command: exit 1, the corrupted bytes located per D rank and region."""
    result = run_cli("execute", "--model", "granite-4.0-h-tiny", "--p-tp", "1", "--d-tp", "2",
                     "--semantics", "vllm", "--device", "cpu", timeout=120)
    assert result.code == 1, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "wrong bytes" in out and "verified" not in out
    assert "D0:" in out and "C: " in out and "temporal bytes read as C" in out
    assert "D1:" in out and "B: " in out and "C read as B" in out
    assert "= B channel 0 byte 0" in out and "which holds C channel 0 byte 0" in out
    assert "which holds ssm head 0 byte 0" in out
    assert "Traceback" not in result.stderr


def test_vllm_wrong_bytes_equal_the_simulation_byte_for_byte():
    code, doc = execute_json("--model", "granite-4.0-h-tiny", "--layers", "6", "--p-tp", "1", "--d-tp", "2",
                             "--semantics", "vllm", "--iters", "1")
    assert code == 1 and not doc["verified"]
    predicted = simulate(local_plan("granite-4.0-h-tiny", 1, 2, 6, "vllm"))
    expected = {(d.d_rank, d.region): d.wrong_bytes for d in predicted.damage}
    measured = {(d["d_rank"], region): count for d in doc["decode"]
                for region, count in d["verdict"]["wrong_by_region"].items()}
    assert set(expected) == {(0, "C"), (1, "B"), (1, "C")}
    assert measured == expected
    for d in doc["decode"]:
        first = d["verdict"]["first_wrong_byte"]
        sim = next(x.first for x in predicted.damage if x.d_rank == d["d_rank"])
        assert (first["wants"], first["reason"], first["source"]["holds"]) == (sim.wants, sim.reason, sim.source.holds)


def test_exact_semantics_on_the_same_pairing_verifies():
    result = run_cli("execute", "--model", "granite-4.0-h-tiny", "--p-tp", "1", "--d-tp", "2",
                     "--semantics", "exact", "--device", "cpu", "--layers", "6", timeout=120)
    assert result.code == 0, result.stdout + result.stderr
    assert result.stdout.count("verified") == 2
    for column in ("D rank", "from P", "bytes", "descriptors", "after merge", "GB/s", "verdict"):
        assert column in result.stdout


@pytest.mark.parametrize("suffix", ["json", "yaml"])
def test_plan_file_written_by_plan_is_executed(tmp_path, suffix):
    path = tmp_path / f"plan.{suffix}"
    written = run_cli("plan", "--model", "qwen3.5-0.8b", "--p-tp", "2", "--d-tp", "1", "--p-num-blocks", "64",
                      "--d-num-blocks", "32", "--request-blocks", "2", "--seed", "7", "--output", str(path),
                      *(["--format", "yaml"] if suffix == "yaml" else []))
    assert written.code == 0, written.stderr
    code, doc = execute_json("--plan", str(path), "--iters", "1")
    assert code == 0 and doc["verified"]
    planned = json.loads(run_cli("plan", "--model", "qwen3.5-0.8b", "--p-tp", "2", "--d-tp", "1", "--p-num-blocks",
                                 "64", "--d-num-blocks", "32", "--request-blocks", "2", "--seed", "7",
                                 "--format", "json").stdout)
    assert doc["request"] == planned["descriptors"]["request"]
    assert doc["decode"][0]["descriptors_posted"] == sum(len(r["local_ids"]) for r in planned["descriptors"]["reads"])


MTP = '{"method":"mtp","num_speculative_tokens":1}'


def test_the_draft_layers_pages_move_and_are_verified(tmp_path):
    """Qwen3.5-0.8B with its MTP layer: execute moves the 7th attention layer's pages too (one
    descriptor more per D rank and attention block than the target alone) and checks every byte,
    from --speculative-config and from a plan file that holds the draft layer."""
    common = ("--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2", "--semantics", "vllm", "--iters", "1")
    _, target = execute_json(*common, "--num-spec", "1")
    code, drafted = execute_json(*common, "--speculative-config", MTP)
    assert code == 0 and drafted["verified"]
    for alone, with_draft in zip(target["decode"], drafted["decode"]):
        # one more attention page per block of the attention group's request
        added = len(drafted["request"]["decode_blocks"][-1])
        assert with_draft["descriptors_posted"] == alone["descriptors_posted"] + added
        assert with_draft["bytes"] > alone["bytes"]
        assert with_draft["verdict"]["checked_bytes"] > alone["verdict"]["checked_bytes"]
    path = tmp_path / "plan.json"
    written = run_cli("plan", *common[:-2], "--p-num-blocks", "16", "--d-num-blocks", "16",
                      "--speculative-config", MTP, "--output", str(path))
    assert written.code == 0, written.stderr
    code, from_file = execute_json("--plan", str(path), "--iters", "1")
    assert code == 0 and from_file["verified"]
    planned = json.loads(path.read_text())
    assert planned["model"]["draft_layers"] == 1
    assert from_file["decode"][0]["descriptors_posted"] == sum(
        len(r["local_ids"]) for r in planned["descriptors"]["reads"] if r["d_rank"] == 0)


def test_a_plan_file_fixes_the_speculative_config(tmp_path):
    path = tmp_path / "plan.json"
    assert run_cli("plan", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "1", "--output", str(path)).code == 0
    result = run_cli("execute", "--plan", str(path), "--device", "cpu", "--speculative-config", MTP)
    assert result.code == 2 and "--speculative-config: the plan file fixes both engines" in result.stderr
