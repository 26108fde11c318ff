"""``mambaxfer bench --engine sglang``: SGLang's WRITE of one slot per entry, as planned and as one
descriptor per P -> D pair, between real NIXL agents (DRAM over UCX), every byte of D checked."""

from __future__ import annotations


import pytest

from cli_run import assert_user_error, run_cli, run_json
from mambaxfer_cli.engines.sglang.plan import plan
from mambaxfer_cli.execute.tasks import cut_layers
from mambaxfer_cli.engines.sglang.transfer.run import D_SLOT, P_SLOT, chosen_writes
from mambaxfer_cli.readers.model_source import load_model
from rank_processes import assert_no_rank_left, new_tag


def bench_json(*args: str, env: dict | None = None) -> tuple[int, dict]:
    return run_json("bench", "--engine", "sglang", "--device", "cpu", "--iters", "3", "--format", "json",
                    "--timeout", "90", *args, env=env)


@pytest.mark.usefixtures("nixl")
@pytest.mark.parametrize("model,layers,p_tp,d_tp", [("qwen3.5-0.8b", 4, 1, 2), ("nemotron-h-8b", 4, 2, 1)])
def test_planned_and_limit_move_the_same_bytes_verified(model, layers, p_tp, d_tp):
    env = new_tag()
    code, doc = bench_json("--model", model, "--layers", str(layers), "--p-tp", str(p_tp), "--d-tp", str(d_tp),
                           "--semantics", "exact", env=env)
    assert code == 0 and doc["verified"], doc
    exact = chosen_writes(plan(cut_layers(load_model(model), layers), p_tp, d_tp), "exact").descriptors(P_SLOT, D_SLOT)
    planned, limit = doc["variants"]["planned"], doc["variants"]["limit"]
    assert planned["descriptors_posted"] == len(exact) and planned["bytes"] == sum(x.length for x in exact)
    assert limit["descriptors_posted"] == len({(x.p_rank, x.d_rank) for x in exact}) == max(p_tp, d_tp)
    assert limit["bytes"] == planned["bytes"]
    for row in (planned, limit):
        assert row["bytes_per_descriptor"] == row["bytes"] // row["descriptors_posted"]
        assert 1 <= row["descriptors_kept"] <= row["descriptors_posted"]
        assert len(row["times_s"]) == 3 and row["wrong_bytes"] == 0 and row["checked_bytes"] > 0
    assert doc["ratio"] == pytest.approx(planned["gb_per_s"]["median"] / limit["gb_per_s"]["median"])
    assert_no_rank_left(env)


@pytest.mark.usefixtures("nixl")
def test_sglang_writes_are_marked_wrong_and_the_limit_is_not():
    result = run_cli("bench", "--engine", "sglang", "--model", "nemotron-h-8b", "--layers", "2", "--p-tp", "1",
                     "--d-tp", "2", "--semantics", "sglang", "--device", "cpu", "--iters", "2", timeout=300)
    assert result.code == 1, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "planned" in out and "WRONG" in out and "limit" in out
    assert "execute --engine sglang --semantics sglang' counts them as check does" in " ".join(result.stderr.split())


@pytest.mark.parametrize("args,fragment", [
    (("--request-blocks", "1,4"), "--request-blocks: vLLM's bench option"),
    (("--chart", "x.png", "--seed", "2"), "--chart, --seed: vLLM's bench options"),
    (("--semantics", "vllm"), "'vllm' is not one of 'exact', 'sglang'"),
    (("--gpu", "B200"), "--gpu: vLLM's option"),
    (("--device", "cpu,cpu"), "SGLang's bench runs on one device (cpu or cuda)"),
])
def test_bad_options_are_one_line(args, fragment):
    result = run_cli("bench", "--engine", "sglang", "--model", "qwen3.5-0.8b", "--p-tp", "1", "--d-tp", "2",
                     "--device", "cpu", *args)
    assert_user_error(result, fragment)


@pytest.mark.usefixtures("nixl")
def test_a_draft_moves_its_kv_after_the_targets_verified():
    """--speculative-algorithm: the target's KV and the draft's pool move, as execute moves them."""
    from mambaxfer_cli.engines.sglang.drafts import draft_for
    from mambaxfer_cli.engines.sglang.transfer.run import transfer

    args = ("--model", "qwen3.5-0.8b", "--layers", "4", "--p-tp", "1", "--d-tp", "2", "--semantics", "exact")
    code, without = bench_json(*args)
    code_draft, drafted = bench_json(*args, "--speculative-algorithm", "NEXTN")
    assert code == code_draft == 0 and drafted["verified"], drafted
    assert drafted["entries"] - without["entries"] == 4      # K and V of the one attention layer, then the draft's
    spec = cut_layers(load_model("qwen3.5-0.8b"), 4)
    planned = plan(spec, 1, 2, draft=draft_for(spec, "NEXTN", None))
    moved = transfer(chosen_writes(planned, "exact"), "exact").descriptors
    assert [drafted["variants"][v]["bytes"] for v in ("planned", "limit")] == [sum(x.length for x in moved)] * 2


@pytest.mark.usefixtures("nixl")
def test_glm_5_next_s_latent_and_index_key_pages_move_beside_its_state_verified():
    """A DSA model: its pool's latent and index-key pages (StateType.DSA) move as execute moves them."""
    from mambaxfer_cli.engines.sglang.transfer.run import transfer

    code, doc = bench_json("--model", "glm-5-next", "--layers", "4", "--p-tp", "2", "--d-tp", "1")
    assert code == 0 and doc["verified"], doc
    spec = cut_layers(load_model("glm-5-next"), 4)          # three KDA layers and an MLA layer
    assert doc["entries"] == 3 * 2 + 2                       # conv and temporal of each, the latent, the index keys
    moved = transfer(chosen_writes(plan(spec, 2, 1), "sglang"), "sglang").descriptors
    index = [x for x in moved if x.length == 64 * (128 + 4)]
    assert len(index) == 2 and doc["variants"]["planned"]["bytes"] == sum(x.length for x in moved)
