"""``mambaxfer execute`` on Qwen4Exp: the PLE page moved for real (NIXL READs, DRAM over UCX, real
rank processes) as vLLM's connector moves it, every byte of D's PLE page verified, a planted wrong
PLE read seen on D, and the bytes ``check`` predicts wrong where one side speculates."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import pytest

from cli_run import run_cli
from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.engines.vllm.plan import PlanOptions, build_plan
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.transfer import whole_pages as ple_module
from mambaxfer_cli.engines.vllm.transfer.plan_source import plan_to_execute
from mambaxfer_cli.execute.tasks import cut_layers
from mambaxfer_cli.engines.vllm.transfer import run as run_module, tasks as tasks_module
from mambaxfer_cli.engines.vllm.transfer.whole_pages import PageRead, side_pages
from mambaxfer_cli.engines.vllm.transfer.run import execute
from mambaxfer_cli.engines.vllm.transfer.tasks import build_tasks
from mambaxfer_cli.execute.tasks import RunSettings
from mambaxfer_cli.engines.vllm.families import qwen4exp_proof as ple_proof
from mambaxfer_cli.readers.model_config import spec_from_config
from mambaxfer_cli.readers.model_source import load_model
from rank_processes import assert_no_rank_left, new_tag

pytestmark = pytest.mark.usefixtures("nixl")

MODEL = "qwen3.8-flash-next"
LAYERS = 4                         # three GDN layers and an attention layer: one KV-cache tensor
PLE_STATE = 10240 * 9 * 2          # channels x rows x bf16: every rank holds all of it
SETTINGS = RunSettings("ple", "cpu", 0, "127.0.0.1", 0, 1)


def execute_json(*args: str, env: dict | None = None) -> tuple[int, dict]:
    result = run_cli("execute", "--model", MODEL, "--layers", str(LAYERS), "--device", "cpu", "--format", "json",
                     "--timeout", "90", "--iters", "1", *args, env=env)
    assert result.code in (0, 1), result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result.code, json.loads(result.stdout)


def ple_side(plan, d_rank=0):
    """D rank ``d_rank``'s PLE pages as execute moves them (lists, reads); None where none move."""
    return next((side for side in side_pages(plan, d_rank) if side.lists.space == "ple"), None)


def misread(monkeypatch, space, change):
    """Every D rank's reads of the ``space`` pages changed by ``change`` wherever execute asks for them."""
    real = ple_module.side_pages

    def changed(plan_, d_rank):
        return tuple(replace(side, reads=tuple(change(r, side) for r in side.reads)) if side.lists.space == space
                     else side for side in real(plan_, d_rank))

    for module in (tasks_module, run_module):
        monkeypatch.setattr(module, "side_pages", changed)


def local_plan(p_tp: int, d_tp: int, semantics: str, block_size: int | None = None):
    return plan_to_execute(cut_layers(load_model(MODEL), LAYERS), p_tp, d_tp, semantics=semantics, coalesce=False,
                           blocks=None, request_blocks=2, seed=0, engine=EngineFlags(block_size=block_size))


@pytest.mark.parametrize("p_tp,d_tp,semantics,block", [(1, 1, "exact", None), (2, 2, "vllm", None),
                                                       (8, 4, "vllm", 832)],
                         ids=["P_TP_1-D_TP_1-exact", "P_TP_2-D_TP_2-vllm", "P_TP_8-D_TP_4-vllm"])
def test_every_byte_of_the_ple_page_is_moved_and_verified(p_tp, d_tp, semantics, block):
    env = new_tag()
    extra = ("--block-size", str(block)) if block else ()
    code, doc = execute_json("--p-tp", str(p_tp), "--d-tp", str(d_tp), "--semantics", semantics, *extra, env=env)
    assert code == 0 and doc["verified"], doc
    plan = local_plan(p_tp, d_tp, semantics, block)
    assert plan.verdict.accepts
    _, decode = build_tasks(plan, SETTINGS)
    page = ple_side(plan).lists.page_bytes
    for d, task in zip(doc["decode"], decode):
        # vLLM: the whole page once per SSM source P rank (8P4D: two); every byte of D's memory checked,
        # its PLE region included.
        reads = len(ple_side(plan, d["d_rank"]).reads)
        assert reads == (p_tp // d_tp if semantics == "vllm" else 1)
        assert d["ple_descriptors"] == reads and d["ple_bytes"] == reads * page
        assert d["descriptors_posted"] == sum(len(r.local_ids) for r in task.reads) + reads + d["indexer_descriptors"]
        assert d["telemetry_bytes"] == d["bytes"] > d["ple_bytes"]
        assert task.memory.side_regions[0] == (1, page) and page >= PLE_STATE
        assert d["verdict"]["checked_bytes"] == task.memory.total_bytes
    assert_no_rank_left(env)


def test_the_table_shows_the_ple_reads():
    result = run_cli("execute", "--model", MODEL, "--layers", str(LAYERS), "--p-tp", "1", "--d-tp", "1",
                     "--device", "cpu", "--iters", "1", timeout=120)
    assert result.code == 0, result.stdout + result.stderr
    assert "PLE" in result.stdout and "1 page read" in result.stdout and "verified" in result.stdout


def test_where_vllm_refuses_the_pairing_no_ple_page_moves():
    # 1P2D crosses the KV-head boundary (2 KV heads): vLLM reads no PLE page; check proves none.
    code, doc = execute_json("--p-tp", "1", "--d-tp", "2", "--semantics", "vllm")
    assert code == 0
    assert all(d["ple_descriptors"] == 0 and d["ple_bytes"] == 0 for d in doc["decode"])
    assert ple_side(local_plan(1, 2, "vllm")) is None


def run_in_process(plan):
    outcome = execute(plan, replace(SETTINGS, run_id=new_tag()["MAMBAXFER_TEST_RUN"][:8]), 90.0)
    return outcome.decode


def test_a_ple_read_from_the_wrong_block_gives_wrong_bytes_on_d(monkeypatch):
    plan = local_plan(1, 1, "exact")
    d_lists = ple_side(plan).lists
    p_block, _ = ple_proof.block_pair(plan)
    wrong = (p_block + 1) % d_lists.logical_blocks
    # P's page of another block: the right layer at the wrong offset
    misread(monkeypatch, "ple", lambda r, _: PageRead(r.p_rank, r.local_ids, (wrong,)))
    [d] = run_in_process(plan)
    check = d.check
    assert not check.ok and set(check.wrong_by_region) == {"ple", "ple page"}
    # Every state byte but those whose pattern happens to agree (about 1 in 256).
    assert 0.99 < check.wrong_by_region["ple"] / PLE_STATE <= 1
    first = check.first_by_region["ple"]
    assert first.reason == f"block {wrong} read instead of {p_block}"
    assert first.wants == first.source.holds == "ple channel 0 row 0 byte 0"
    assert f"PLE layer 1 block {wrong} offset 0" in first.describe()
    assert d.ple_descriptors == 1


def test_a_ple_read_onto_the_wrong_d_block_leaves_the_page_poisoned_and_is_a_stray_write(monkeypatch):
    plan = local_plan(1, 1, "exact")
    d_lists = ple_side(plan).lists
    _, d_block = ple_proof.block_pair(plan)
    wrong = (d_block + 1) % d_lists.logical_blocks
    misread(monkeypatch, "ple", lambda r, _: PageRead(r.p_rank, (wrong,), r.remote_ids))
    [d] = run_in_process(plan)
    check = d.check
    assert check.first_by_region["ple"].reason == "never written"
    assert 0.99 < check.wrong_by_region["ple"] / PLE_STATE <= 1
    assert check.wrong_by_region["outside the request"] > 0.99 * d_lists.page_bytes
    assert check.first_stray is not None and check.first_stray.block == wrong


FIXTURE = Path(__file__).parent / "fixtures" / "hf-configs" / "Qwen__Qwen3.8-Flash-Next.partial.json"
SMALL_GDN = dict(linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16)


def config_model(**text):
    config = json.loads(FIXTURE.read_text())
    config = copy.deepcopy(config)
    config["text_config"].update(text)
    return spec_from_config(config, name=MODEL, source=str(FIXTURE))


def test_num_spec_on_d_only_corrupts_the_ple_state_as_check_predicts():
    # D speculates (MTP): its PLE state has a row more per channel; with 8 KV heads both pages pad to
    # the same attention page, vLLM accepts them and D reads P's page whole onto its own rows
    # (vllm-ple-differs). execute has one --num-spec for both sides: the plan is built here.
    spec = cut_layers(config_model(num_key_value_heads=8, **SMALL_GDN), LAYERS)
    draft = cut_layers(config_model(num_key_value_heads=8, num_speculative_tokens=1, **SMALL_GDN), LAYERS)
    probe = build_plan(draft, 2, 2, PlanOptions(semantics="vllm", prefill_model=spec))
    engines = {side: EngineFlags(num_blocks=16 * getattr(probe, side).geometry.blocks_per_logical)
               for side in ("prefill", "decode")}
    plan = build_plan(draft, 2, 2, PlanOptions(semantics="vllm", prefill=engines["prefill"],
                                               decode=engines["decode"], prefill_model=spec, request_blocks=2))
    assert plan.verdict.accepts and any(w.code == "vllm-ple-differs" for w in plan.warnings)
    predicted = ple_proof.prove_ple(plan, spec)
    assert predicted is not None and predicted.damage
    expected = {d.d_rank: d.wrong_bytes for d in predicted.damage}
    decode = run_in_process(plan)
    measured = {d.d_rank: d.check.wrong_by_region.get("ple", 0) for d in decode}
    assert measured == expected
    for d in decode:
        first, sim = d.check.first_by_region["ple"], next(x.first for x in predicted.damage if x.d_rank == d.d_rank)
        assert (first.offset, first.wants, first.source.holds) == (sim.offset, sim.wants, sim.source.holds)


def test_two_hosts_move_the_ple_page_and_the_prefill_side_counts_it():
    from test_execute_two_hosts import Pair, direct

    listen, peer = direct(2)
    pair = Pair(("--model", MODEL, "--layers", str(LAYERS), "--p-tp", "2", "--d-tp", "2", "--semantics", "vllm",
                 "--format", "json", "--timeout", "120"), listen, peer)
    prefill, decode = pair.results()
    assert decode.code == 0 and prefill.code == 0, decode.stderr + prefill.stderr
    d_doc, p_doc = decode.doc, prefill.doc
    assert d_doc["verified"] and all(d["ple_descriptors"] == 1 for d in d_doc["decode"])
    # What P served (its PLE pages included) is what D moved.
    assert sum(s["bytes"] for p in p_doc["prefill"] for s in p["served"]) == d_doc["total_bytes"]
    assert_no_rank_left(pair.tag)


def test_the_qsa_pages_move_beside_the_ple_page_and_every_byte_is_verified():
    # --layers 4: one indexed-attention layer; a request of 2 attention blocks: the ring's one page
    # and the compressed keys of both blocks, from the one attention source.
    code, doc = execute_json("--p-tp", "2", "--d-tp", "2", "--semantics", "vllm")
    assert code == 0 and doc["verified"]
    plan = local_plan(2, 2, "vllm")
    ring, ckey = [d for _, d in ple_module.side_lists(plan)][1:]
    assert (ring.space, ckey.space) == ("ring", "ckey") and ring.page_bytes == 4 * 140 * 2
    for d in doc["decode"]:
        assert d["indexer_descriptors"] == 3 and d["indexer_bytes"] == ring.page_bytes + 2 * ckey.page_bytes


def test_the_mtp_qsa_layers_pages_move_after_the_cut_and_every_byte_is_verified():
    """--layers 4 keeps the MTP draft layer (the engine holds it whatever the cut): a second
    indexed-attention layer, whose ring and compressed keys move and are checked as the target's."""
    mtp = '{"method":"mtp","num_speculative_tokens":1}'
    _, alone = execute_json("--p-tp", "2", "--d-tp", "2", "--semantics", "vllm", "--num-spec", "1")
    code, drafted = execute_json("--p-tp", "2", "--d-tp", "2", "--semantics", "vllm", "--speculative-config", mtp)
    assert code == 0 and drafted["verified"]
    for one, two in zip(alone["decode"], drafted["decode"]):
        assert two["indexer_descriptors"] == 2 * one["indexer_descriptors"] == 6
        assert two["indexer_bytes"] == 2 * one["indexer_bytes"]
        assert two["bytes"] > one["bytes"]


def test_a_compressed_key_read_from_the_wrong_block_is_seen_on_d(monkeypatch):
    plan = local_plan(1, 1, "exact")
    # P's compressed keys of another block
    misread(monkeypatch, "ckey", lambda r, side: PageRead(
        r.p_rank, r.local_ids, tuple((i + 1) % side.prefill_lists.length for i in r.remote_ids)))
    [d] = run_in_process(plan)
    check = d.check
    assert not check.ok and set(check.wrong_by_region) == {"ckey"}
    first = check.first_by_region["ckey"]
    assert first.wants == "ckey key 0 byte 0" and first.reason.startswith("block ")
    assert "indexer compressed keys layer 3" in first.describe()


def test_a_ring_vllm_reads_in_pieces_is_not_executed():
    # 8 KV heads, P TP 2 -> D TP 4 under BLHNC: vLLM reads D1's ring from past the page; execute
    # says so and leaves it to check.
    spec = cut_layers(config_model(num_key_value_heads=8, ple_layer_ids=[], linear_num_value_heads=8,
                                   linear_num_key_heads=8, linear_key_head_dim=16, linear_value_head_dim=16), LAYERS)
    flags = EngineFlags(num_blocks=64, block_size=256)
    plan = build_plan(spec, 2, 4, PlanOptions(semantics="vllm", prefill=flags, decode=flags,
                                              kv_cache_layout="BLHNC", request_blocks=2))
    assert plan.verdict.accepts
    with pytest.raises(UserError, match="vLLM reads D1's QSA raw-key ring in pieces .* 'mambaxfer check' proves"):
        build_tasks(plan, SETTINGS)
