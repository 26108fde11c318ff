"""The attention KV of ``execute --engine sglang``: SGLang's head slices and the exact heads, on
patterned pages (every pairing SGLang serves), and moved by real NIXL WRITEs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from cli_run import run_json
from mambaxfer_cli.engines.sglang.plan import plan
from mambaxfer_cli.engines.sglang.heads import HeadSlice
from mambaxfer_cli.engines.sglang.kv import KV_FIELDS, KVSide, exact_kv_writes, kv_entries, sglang_kv_writes
from mambaxfer_cli.engines.sglang.ranks import writers
from mambaxfer_cli.engines.sglang.shapes import sglang_model, tp_sizes
from mambaxfer_cli.engines.sglang.writes import StateWrite
from mambaxfer_cli.execute.tasks import cut_layers
from mambaxfer_cli.engines.sglang.transfer.run import PAGE_SIZE, transfer
from mambaxfer_cli.proof.pattern import POISON
from mambaxfer_cli.readers.model_source import load_model
from rank_processes import assert_no_rank_left, new_tag

MODELS = ("qwen3.5-0.8b", "nemotron-h-8b", "qwen3-next-80b", "granite-4.0-h-tiny")


def landed(writes: tuple[StateWrite, ...], prefill: KVSide, decode: KVSide, field: str) -> list[np.ndarray]:
    """Each decode rank's page after the writes, from patterned prefill pages."""
    sources = [prefill.rank(p).page(field, 7, 3) for p in range(prefill.tp)]
    pages = [np.full(decode.page_bytes, POISON, dtype=np.uint8) for _ in range(decode.tp)]
    for w in writes:
        if w.field == field:
            assert 0 <= w.dst and w.dst + w.length <= decode.page_bytes
            pages[w.d_rank][w.dst:w.dst + w.length] = sources[w.p_rank][w.src:w.src + w.length]
    return pages


def wrong_bytes(writes: tuple[StateWrite, ...], prefill: KVSide, decode: KVSide) -> int:
    return sum(int(np.count_nonzero(page != decode.rank(d).page(field, 7, 3)))
               for field in KV_FIELDS for d, page in enumerate(landed(writes, prefill, decode, field)))


def pairings(model: str) -> list[tuple[int, int]]:
    sizes = tp_sizes(sglang_model(load_model(model)))
    return [(p, d) for p in sizes for d in sizes if p % d == 0 or d % p == 0]


@pytest.mark.parametrize("model", MODELS)
def test_sglang_head_slices_and_the_exact_heads_fill_every_page_alike(model):
    """Every pairing SGLang serves: both write sets give each decode page exactly the heads it
    keeps, token by token; SGLang's write one descriptor per token and writer where TP differs."""
    checked = 0
    for p_tp, d_tp in pairings(model):
        planned = plan(load_model(model), p_tp, d_tp)
        prefill, decode = KVSide(planned.model, p_tp, PAGE_SIZE), KVSide(planned.model, d_tp, PAGE_SIZE)
        theirs, exact = sglang_kv_writes(prefill, decode, planned.head_slices), exact_kv_writes(prefill, decode)
        assert wrong_bytes(theirs, prefill, decode) == 0, (p_tp, d_tp)
        assert wrong_bytes(exact, prefill, decode) == 0, (p_tp, d_tp)
        assert planned.verdict.heads_wrong == 0
        for d in range(d_tp):
            mine = [w for w in theirs if w.d_rank == d and w.field == "k"]
            per_writer = 1 if p_tp == d_tp else PAGE_SIZE
            assert len(mine) == per_writer * len(writers(p_tp, d_tp, d)), (p_tp, d_tp, d)
        checked += 1
    assert checked >= 4


def test_a_wrong_head_slice_is_seen_on_the_page():
    """The simulation can fail: the two decode ranks' slices swapped give each the other's head."""
    planned = plan(load_model("qwen3.5-0.8b"), 1, 2)
    prefill, decode = KVSide(planned.model, 1, PAGE_SIZE), KVSide(planned.model, 2, PAGE_SIZE)
    swapped = tuple((d, p, HeadSlice(1 - s.src_start, s.count, s.dst_start)) for d, p, s in planned.head_slices)
    assert wrong_bytes(sglang_kv_writes(prefill, decode, swapped), prefill, decode) > 0


def test_kv_entries_run_k_then_v_per_attention_layer():
    model = sglang_model(load_model("qwen3.5-0.8b"))
    side = KVSide(model, 2, PAGE_SIZE)
    entries = kv_entries(side)
    layers = [i for i, kind in enumerate(model.layers) if kind == "attention"]
    assert [(e.field, e.layer_id) for e in entries] == [("k", i) for i in layers] + [("v", i) for i in layers]
    assert model.head_size is not None
    assert all(e.item_len == PAGE_SIZE * 1 * model.head_size * 2 for e in entries)   # 1 head of bf16 per rank


def execute_json(*args: str, env: dict | None = None) -> tuple[int, dict]:
    return run_json("execute", "--engine", "sglang", "--device", "cpu", "--format", "json", "--timeout", "90",
                    "--iters", "1", *args, env=env)


@pytest.mark.usefixtures("nixl")
@pytest.mark.parametrize("p_tp,d_tp", [(1, 4), (4, 1), (2, 2)], ids=["P_TP_1-D_TP_4", "P_TP_4-D_TP_1", "P_TP_2-D_TP_2"])
def test_sglang_kv_writes_land_every_head_byte(p_tp, d_tp):
    """Real WRITEs of SGLang's head slices (GQA replication on either side, and equal TP): every
    byte of every K and V page verified."""
    env = new_tag()
    code, doc = execute_json("--model", "qwen3.5-0.8b", "--layers", "8", "--p-tp", str(p_tp), "--d-tp", str(d_tp),
                             "--semantics", "sglang", env=env)
    assert code == 0 and doc["verified"], doc
    assert doc["attention"]["layers"] == 2 and doc["attention"]["page_size"] == PAGE_SIZE
    moved = transfer(plan(cut_layers(load_model("qwen3.5-0.8b"), 8), p_tp, d_tp), "sglang")
    for d in doc["decode"]:
        kv = [f for f in d["fields"] if f["field"] in KV_FIELDS]
        assert [(f["field"], f["layers"]) for f in kv] == [("k", 2), ("v", 2)]
        assert d["descriptors"] == sum(1 for x in moved.descriptors if x.d_rank == d["d_rank"])
    assert_no_rank_left(env)


@pytest.mark.usefixtures("nixl")
def test_a_wrong_head_slice_shows_as_wrong_kv_bytes_on_the_decode_side():
    """A planted fault reaches the real transfer: with the two decode ranks' head slices swapped,
    each D rank's K and V pages hold the other's head, every byte of them counted wrong."""
    from mambaxfer_cli.engines.sglang.transfer.run import execute
    from mambaxfer_cli.execute.tasks import RunSettings

    planned = plan(cut_layers(load_model("qwen3.5-0.8b"), 8), 1, 2)
    swapped = tuple((d, p, HeadSlice(1 - s.src_start, s.count, s.dst_start)) for d, p, s in planned.head_slices)
    outcome = execute(replace(planned, head_slices=swapped), "sglang", RunSettings("kvfault", "cpu", 0, "127.0.0.1",
                                                                                    0, 1), 90)
    assert not outcome.verified
    head_bytes = outcome.attention["head_bytes"] if outcome.attention else 0
    for d in outcome.decode:
        kv = {f.field: f for f in d.fields if f.field in KV_FIELDS}
        assert set(kv) == {"k", "v"}
        for f in kv.values():
            assert f.missing == f.beyond == 0
            assert f.wrong == 2 * PAGE_SIZE * head_bytes   # every byte of the page, 2 layers
        assert all(f.bad == 0 for f in d.fields if f.field not in KV_FIELDS)
        assert d.first is not None and d.first.field == "k" and "head" in d.first.holds
