"""The parts of execute that need no NIXL: rank tasks, the side channel, D's verification over a
transfer done with memmove through the very descriptor tables a rank prepares, and plan files."""

from __future__ import annotations

from array import array
import ctypes
import json
import socket
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from cli_run import assert_user_error, run_cli
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.transfer import tasks as tasks_module
from mambaxfer_cli.execute.memory import RankMemory
from mambaxfer_cli.execute.difference import first_difference
from mambaxfer_cli.engines.vllm.transfer.plan_source import load_plan_file, plan_to_execute
from mambaxfer_cli.execute.tasks import cut_layers
from mambaxfer_cli.engines.vllm.transfer.exchange import fill
from mambaxfer_cli.execute.side_channel import PortInUse, SideChannelError, SideChannelServer, fetch
from mambaxfer_cli.engines.vllm.transfer.tasks import build_tasks
from mambaxfer_cli.execute.tasks import RunSettings
from mambaxfer_cli.engines.vllm.transfer.verify import verify_decode
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.engines.vllm.proof.addresses import address_table
from mambaxfer_cli.proof.pattern import POISON
from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.engines.vllm.plan import PlanOptions, build_plan

SETTINGS = RunSettings("test", "cpu", 0, "127.0.0.1", 0, 1)
TOY = str(Path(__file__).resolve().parents[1] / "examples" / "models" / "toy-mamba2.yaml")


def small_plan(model: str, p_tp: int, d_tp: int, layers: int | None = None, semantics: str = "exact"):
    return plan_to_execute(cut_layers(load_model(model), layers), p_tp, d_tp, semantics=semantics, coalesce=False,
                           blocks=None, request_blocks=2, seed=3)


# --- tasks ----------------------------------------------------------------------------------------

def test_tasks_follow_the_plan():
    plan = small_plan("jamba", 4, 2, layers=8)
    prefill, decode = build_tasks(plan, SETTINGS)
    assert [p.consumers for p in prefill] == [(0,), (0,), (1,), (1,)]
    assert [d.sources for d in decode] == [(0, 1), (2, 3)]
    assert [p.port for p in prefill] == [0, 0, 0, 0]
    assert [p.port for p in build_tasks(plan, replace(SETTINGS, port=5600))[0]] == [5600, 5601, 5602, 5603]
    d = decode[0]
    # One KV-cache tensor of 32 logical pages (twice the request's 8 groups x 2 blocks); Jamba's
    # geometry at TP 2 in vLLM 0.34 (128-token blocks of 4 KV heads of 128, bf16): pages of 128 * 2048
    # bytes.
    assert (d.memory.tensors, d.memory.logical_blocks, d.memory.page_bytes) == (1, 32, 128 * 2048)
    assert d.memory.total_bytes == 32 * 128 * 2048
    assert len(d.expected) == 7 * 2 + 2       # 7 SSM groups x 2 blocks, 1 attention group x 2 blocks


def test_a_request_that_writes_a_d_block_twice_cannot_be_executed():
    spec = cut_layers(load_model("jamba"), 8)
    text = "3,4;3,4;5,6;7,8;9,10;11,12;13,14;15,16"
    options = PlanOptions(prefill=EngineFlags(num_blocks=128), decode=EngineFlags(num_blocks=128),
                          decode_blocks=text)
    with pytest.raises(UserError, match="--decode-blocks: block 3 is in groups 0 and 1"):
        build_plan(spec, 1, 1, options)   # the planner refuses it first; execute's own guard:
    plan = build_plan(spec, 1, 1, replace(options, prefill_blocks="1,2;17,18;19,20;21,22;23,24;25,26;27,28;29,30",
                                          decode_blocks="3,4;31,32;5,6;7,8;9,10;11,12;13,14;15,16"))
    twice = tuple(np.array(b, dtype=np.int64) for b in ([3, 4], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12],
                                                         [13, 14], [15, 16]))
    request = replace(plan.descriptors.request, decode_blocks=twice)
    broken = replace(plan, descriptors=replace(plan.descriptors, request=request))
    with pytest.raises(UserError, match=r"D logical block 3 \(SSM\) is written by the request more than once"):
        build_tasks(broken, SETTINGS)


def test_ids_outside_the_lists_cannot_be_executed():
    plan = small_plan("qwen3.5-0.8b", 1, 1, layers=4)
    read = plan.descriptors.reads[0]
    bad = replace(read, remote_ids=array("q", (i + 10**6 for i in read.remote_ids)))
    broken = replace(plan, descriptors=replace(plan.descriptors, reads=(bad,)))
    with pytest.raises(UserError, match="remote ID .* is outside its list"):
        build_tasks(broken, SETTINGS)


def test_descriptors_beyond_registered_memory_cannot_be_executed():
    plan = small_plan("jamba", 1, 1, layers=8)
    read = plan.descriptors.reads[0]
    beyond = plan.descriptors.prefill.logical_blocks * plan.page_bytes[0]
    remote = replace(read.remote, regions=tuple((offset + beyond, size) for offset, size in read.remote.regions))
    broken = replace(plan, descriptors=replace(plan.descriptors, reads=(replace(read, remote=remote),)))
    with pytest.raises(UserError, match=r"D0 <- P0 \(base\): remote ID \d+ points beyond the rank's registered memory"):
        build_tasks(broken, SETTINGS)


def test_engines_larger_than_half_the_memory_cannot_be_executed(monkeypatch):
    monkeypatch.setattr(tasks_module, "available_memory", lambda: 2**30)
    plan = plan_to_execute(load_model("jamba"), 1, 1, semantics="exact", coalesce=False, blocks=512,
                           request_blocks=2, seed=0)
    with pytest.raises(UserError, match=r"need .* GiB of DRAM over 2 ranks .* more than half of the 1.00 GiB"):
        build_tasks(plan, SETTINGS)


def test_cut_layers():
    spec = load_model("jamba")
    assert cut_layers(spec, None) is spec
    assert cut_layers(spec, 8).layers == ("ssm",) * 4 + ("attention",) + ("ssm",) * 3
    with pytest.raises(UserError, match="hold no SSM layer"):
        cut_layers(replace(spec, layers=("attention",) + spec.layers), 1)


# --- verification over a transfer through the rank's own descriptor tables ---------------------------

def memmove_transfer(plan):
    """P ranks filled, D ranks poisoned, then every (local, remote) ID pair copied with memmove
    between the addresses of the tables a D rank hands to NIXL."""
    prefill, decode = build_tasks(plan, SETTINGS)
    p_mem = []
    for task in prefill:
        memory = RankMemory(task.memory, "cpu", 0)
        fill(task, memory)
        p_mem.append(memory)
    results = []
    for task in decode:
        memory = RankMemory(task.memory, "cpu", 0)
        memory.poison()
        for read in task.reads:
            src = p_mem[read.p_rank]
            local = address_table(read.local, memory.bases, task.memory.page_bytes)[read.local_ids]
            remote = address_table(read.remote, src.bases, task.prefill_memory.page_bytes)[read.remote_ids]
            assert np.array_equal(local[:, 1], remote[:, 1])
            for (dst, size, _), (source, _, _) in zip(local.tolist(), remote.tolist()):
                ctypes.memmove(dst, source, size)
        results.append((task, memory))
    return results, p_mem


def fetch_all(task, memory):
    return ([memory.fetch(i) for i in range(memory.count)],)


@pytest.mark.parametrize("model,p_tp,d_tp,layers", [
    ("jamba", 1, 4, 8), ("jamba", 4, 2, 8), ("granite-4.0-h-tiny", 2, 4, 6), ("qwen3.5-0.8b", 4, 1, 4),
    ("mamba-130m", 2, 3, None), (TOY, 4, 2, None),
])
def test_exact_plans_verify(model, p_tp, d_tp, layers):
    results, _ = memmove_transfer(small_plan(model, p_tp, d_tp, layers))
    for task, memory in results:
        verdict = verify_decode(task, *fetch_all(task, memory))
        assert verdict.ok, verdict.lines()
        assert verdict.checked_bytes == task.memory.total_bytes


def test_a_wrong_byte_is_located_as_check_locates_it():
    results, _ = memmove_transfer(small_plan("granite-4.0-h-tiny", 2, 1, layers=6))
    task, memory = results[0]
    page = task.expected[0]
    c = task.layout.region("C")
    memory.host(page.tensor)[page.block, c.offset + 5] ^= 0xFF
    verdict = verify_decode(task, *fetch_all(task, memory))
    assert verdict.wrong_bytes == 1 and verdict.wrong_by_region == {"C": 1}
    first = verdict.first
    assert (first.block, first.p_block, first.offset) == (page.block, page.p_block, c.offset + 5)
    assert first.wants == "C channel 0 byte 5"
    # Replicated group: P0 and P1 both hold it; the exact plan reads it from P0.
    assert first.source.p_rank == 0 and first.source.holds == "C channel 0 byte 5"
    assert first.source.block == page.p_block
    assert "C channel 0 byte 5" in verdict.lines()[0]


def test_a_page_outside_the_request_must_stay_poisoned():
    results, _ = memmove_transfer(small_plan("jamba", 1, 2, layers=8))   # pages padded to the attention page
    task, memory = results[1]
    assert task.memory.page_bytes > task.layout.state_bytes
    requested = {e.block for e in task.expected if e.tensor == 0}     # SSM and attention pages alike
    outside = next(b for b in range(task.memory.logical_blocks) if b not in requested)
    memory.host(0)[outside, 100] = 0
    padding_block = min(e.block for e in task.expected if e.kind == "ssm" and e.tensor == 0)
    memory.host(0)[padding_block, task.layout.state_bytes] = 1    # page padding is never read either
    verdict = verify_decode(task, *fetch_all(task, memory))
    assert verdict.wrong_by_region == {"outside the request": 1, "padding": 1}
    assert verdict.first is None
    assert f"block {min(padding_block, outside)}" in verdict.first_stray.describe(1)
    assert f"must stay poisoned (0x{POISON:02x})" in verdict.lines()[0]


def test_vllm_reads_of_replicated_groups_are_caught():
    results, _ = memmove_transfer(small_plan("granite-4.0-h-tiny", 1, 2, layers=6, semantics="vllm"))
    verdicts = [verify_decode(task, *fetch_all(task, memory)) for task, memory in results]
    assert set(verdicts[0].first_by_region) == {"C"}
    assert set(verdicts[1].first_by_region) == {"B", "C"}
    assert verdicts[0].first.reason == "temporal bytes read as C"
    assert verdicts[1].first_by_region["B"].reason == "C read as B"


# --- side channel -----------------------------------------------------------------------------------

def serve_in_thread(server):
    requests = []

    def loop():
        while not requests:
            got = server.serve(lambda r: ({"echo": r["d_rank"]}, b"metadata"), 0.01, lambda: None)
            if got is not None:
                requests.append(got)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread, requests


def test_side_channel_round_trip():
    server = SideChannelServer("127.0.0.1", 0)
    try:
        thread, requests = serve_in_thread(server)
        header, blob = fetch("127.0.0.1", server.port, {"d_rank": 3}, "P0", lambda: None)
        thread.join()
        assert (header, blob, requests) == ({"echo": 3}, b"metadata", [{"d_rank": 3}])
    finally:
        server.close()


def test_side_channel_port_in_use():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(PortInUse, match="already in use"):
            SideChannelServer("127.0.0.1", taken.getsockname()[1])


class Told(Exception):
    """Stands for the coordinator's stop."""


def test_side_channel_peer_that_never_answers_is_waited_for_until_the_rank_is_stopped():
    # No clock of its own: the wait asks whether to go on while the peer is silent, and ends when told.
    asked = []

    def keep_going():
        asked.append(True)
        if len(asked) == 3:
            raise Told()

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        with pytest.raises(Told):
            fetch("127.0.0.1", silent.getsockname()[1], {"d_rank": 0}, "P2", keep_going)
    assert len(asked) == 3


def test_side_channel_refused():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(SideChannelError, match="refused the connection"):
        fetch("127.0.0.1", port, {"d_rank": 0}, "P0", lambda: None)


# --- plan files -------------------------------------------------------------------------------------

def test_first_difference():
    assert first_difference({"a": [1, 2]}, {"a": [1, 2]}) is None
    assert first_difference({"a": [1, 2]}, {"a": [1, 3]}) == ("a[1]", 2, 3)
    assert first_difference({"a": [1]}, {"a": [1, 2]}) == ("a.length", 1, 2)
    assert first_difference({"a": 1}, {"a": 1.0}) == ("a", 1, 1.0)
    assert first_difference({"a": 1}, {"b": 1})[0] == "a"


def test_plan_file_round_trip(tmp_path):
    plan = small_plan("granite-4.0-h-tiny", 2, 1, layers=6)   # a cut model: the file says how many layers
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan.to_dict()))
    again = load_plan_file(path)
    assert again.to_dict() == plan.to_dict()
    assert again.model.layers == plan.model.layers


def test_plan_file_with_different_engines_on_each_side(tmp_path):
    spec = load_model("qwen3.5-0.8b")
    options = PlanOptions(prefill=EngineFlags(num_blocks=640, attention_backend="FLASHINFER"),
                          decode=EngineFlags(num_blocks=960, attention_backend="FLASHINFER", prefix_caching=False),
                          coalesce=True, request_blocks=3, seed=11)
    plan = build_plan(spec, 1, 2, options)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan.to_dict()))
    assert load_plan_file(path).to_dict() == plan.to_dict()


def test_execute_help_and_no_heavy_imports_in_the_coordinator():
    result = run_cli("execute", "--help")
    assert result.code == 0
    for option in ("--p-tp", "--d-tp", "--device", "--semantics", "--layers", "--blocks", "--request-blocks",
                   "--iters", "--seed", "--timeout", "--format", "--plan", "--host", "--port"):
        assert option in result.stdout
    probe = ("import sys, json\n"
             "import mambaxfer_cli.execute.coordinator, mambaxfer_cli.engines.vllm.transfer.plan_source, "
             "mambaxfer_cli.engines.vllm.transfer.verify, mambaxfer_cli.execute.device, "
             "mambaxfer_cli.engines.vllm.views.execute\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('torch', 'nixl', 'nixl_cu12', 'nixl_cu13'))))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


@pytest.mark.parametrize("header", [b"[" * 100_000, b"[1, 2]", b"\xff\xfe", b"99" * 3000])
def test_a_frame_that_is_no_header_is_a_side_channel_error(header):
    """Whatever a peer sends as a header: a JSON object, or a SideChannelError (never RecursionError,
    a list where a dict is read, or a decoding error)."""
    import struct

    from mambaxfer_cli.execute.side_channel import recv_frame

    a, b = socket.socketpair()
    try:
        a.sendall(struct.pack("!II", len(header), 0) + header)
        with pytest.raises(SideChannelError, match="not a mambaxfer side-channel frame"):
            recv_frame(b, lambda: None, "P0")
    finally:
        a.close()
        b.close()


def test_a_plan_file_too_large_for_this_machine_is_refused_with_plan_s_options(tmp_path):
    """Under --plan, --blocks and --layers do not apply: the advice names what plans the blocks."""
    plan_file = tmp_path / "big.json"
    made = run_cli("plan", "--model", "jamba", "--p-tp", "1", "--d-tp", "2", "--p-num-blocks", "1000000",
                   "--d-num-blocks", "1000000", "--output", str(plan_file))
    assert made.code == 0, made.stderr
    result = run_cli("execute", "--plan", str(plan_file), "--device", "cpu")
    assert_user_error(result, "more than half of the", "plan it again with fewer --p-num-blocks/--d-num-blocks")
    assert "--blocks" not in result.stderr.replace("--p-num-blocks", "").replace("--d-num-blocks", "")
