"""NIXL 1.5's (N, 5) strided lists: the same descriptors, in the same ID order, as the expanded
table, and NIXL here accepts them in a real DRAM READ."""

from __future__ import annotations

import numpy as np
import pytest

from mambaxfer_cli.engines.vllm.proof.addresses import address_table, expand, strided
from mambaxfer_cli.engines.vllm.transfer.plan_source import plan_to_execute
from mambaxfer_cli.execute.tasks import cut_layers
from mambaxfer_cli.readers.model_source import load_model


@pytest.mark.parametrize("model,p_tp,d_tp,semantics", [
    ("jamba", 1, 4, "vllm"), ("jamba", 4, 1, "exact"), ("qwen3.5-0.8b", 1, 2, "vllm"),
    ("qwen3-next-80b", 2, 1, "exact"), ("mamba-130m", 1, 2, "exact"), ("granite-4.0-h-tiny", 4, 2, "vllm")])
def test_strided_rows_expand_to_the_table(model, p_tp, d_tp, semantics):
    plan = plan_to_execute(cut_layers(load_model(model), 6), p_tp, d_tp, semantics=semantics, coalesce=False,
                           blocks=None, request_blocks=2, seed=0)
    seen = 0
    for read in plan.descriptors.reads:
        for dlist, page in ((read.local, plan.decode.page_bytes), (read.remote, plan.prefill.page_bytes)):
            bases = [(1 << 40) + i * (1 << 32) for i in range(dlist.engine.tensors)]
            rows = strided(dlist, bases, page, 3)
            if rows is None:
                assert dlist.pieces > 1
                continue
            seen += 1
            assert rows.shape[0] < dlist.length or dlist.length <= 2
            assert np.array_equal(expand(rows), address_table(dlist, bases, page, 3))
    assert seen


@pytest.mark.usefixtures("nixl")
def test_nixl_reads_through_strided_lists():
    from mambaxfer_cli.execute.nixl_api import load_nixl

    api = load_nixl("cpu")
    config = api.nixl_agent_config(enable_prog_thread=False, backends=["UCX"])
    reader, owner = api.nixl_agent("strided-reader", config), api.nixl_agent("strided-owner", config)
    src = (np.arange(1 << 20) % 251).astype(np.uint8)
    dst = np.zeros(1 << 20, dtype=np.uint8)
    regs = [reader.register_memory([(dst.ctypes.data, dst.size, 0, "")], "DRAM"),
            owner.register_memory([(src.ctypes.data, src.size, 0, "")], "DRAM")]
    name = reader.add_remote_agent(owner.get_agent_metadata())

    def rows(base):   # 4 rows of 16 descriptors of 1 KiB, 8 KiB apart
        return np.array([[base + r * 2048, 1024, 0, 8192, 16] for r in range(4)], dtype=np.uint64)

    local = reader.prep_xfer_dlist("NIXL_INIT_AGENT", rows(dst.ctypes.data), "DRAM")
    remote = reader.prep_xfer_dlist(name, rows(src.ctypes.data), "DRAM")
    ids = np.arange(64, dtype=np.int32)
    xfer = reader.make_prepped_xfer("READ", local, ids, remote, ids[::-1].copy(), b"")
    try:
        reader.transfer(xfer)
        for _ in range(100000):
            if reader.check_xfer_state(xfer) == "DONE":
                break
            owner.get_new_notifs()
        else:
            pytest.fail("the READ did not complete")
        want = np.zeros_like(dst)
        L, R = expand(rows(0)), expand(rows(0))
        for i, j in zip(ids, ids[::-1]):
            want[int(L[i, 0]):int(L[i, 0]) + 1024] = src[int(R[j, 0]):int(R[j, 0]) + 1024]
        assert np.array_equal(dst, want) and np.count_nonzero(want)
    finally:
        for handle in (xfer, local, remote):
            handle.release()
        reader.remove_remote_agent(name)
        reader.deregister_memory(regs[0])
        owner.deregister_memory(regs[1])
