"""P and D keep SSM states of different sizes (a dtype vLLM's handshake does not compare): with
P TP > D TP, vLLM posts descriptor pairs of unequal length and NIXL refuses every READ; with
P TP <= D TP, D reads P's state with its own offsets and lands wrong bytes.

Sources: vLLM 0.33 ``nixl/base_worker.py`` ``_build_mamba_remote`` (``ssm_read_size`` is D's own
size when ``tp_ratio >= 1``, P's ``ssm_sizes[1]`` when it is negative) and
``_build_local_splits_from_plan`` (D's SSM descriptor split into ``len(source ranks)`` slices);
NIXL 1.5.1 ``makeXferReq`` refuses a pair of unequal lengths (``nixlInvalidParamError``, "length
mismatch"; ``test_nixl_refuses_descriptor_pairs_of_unequal_length`` below runs it).
"""

from __future__ import annotations

import json

import pytest

from cli_run import run_cli
from mambaxfer_cli.engines.vllm.startup import rank_layouts
from mambaxfer_cli.planning.model import ModelSpec, Variant
from mambaxfer_cli.engines.vllm.reads import vllm_length_mismatches, vllm_reads
from mambaxfer_cli.planning.reads import misreads
from mambaxfer_cli.engines.vllm.preflight.report import preflight
from mambaxfer_cli.engines.vllm.serve_args import parse_serve
from mambaxfer_cli.readers.model_source import load_model

DS = "VLLM_SSM_CONV_STATE_LAYOUT=DS"
P_KV = """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'"""
D_KV = """--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'"""


def mamba1(ssm_dtype: str) -> ModelSpec:
    return ModelSpec(name="m1", source="", variant=Variant("mamba1"),
                     params={"intermediate_size": 16, "d_state": 4}, layers=("ssm",),
                     conv_kernel=4, num_spec=0, conv_dtype="bfloat16", ssm_dtype=ssm_dtype)


def test_wider_p_state_p_tp2_d_tp1_is_two_length_mismatches_by_hand():
    # D TP 1, bfloat16: temporal 16 channels x 4 x 2 B = 128 bytes, split into 2 slices of 64.
    # P TP 2, float32: 8 channels x 4 x 4 B = 128 bytes each: 128 != 64 for both sources.
    prefill, decode = rank_layouts(mamba1("float32"), 2), rank_layouts(mamba1("bfloat16"), 1)
    bad = vllm_length_mismatches(prefill, decode)
    assert [(m.d_rank, m.p_rank, m.region, m.local_bytes, m.remote_bytes) for m in bad] == [
        (0, 0, "ssm", 64, 128), (0, 1, "ssm", 64, 128)]
    # The reads vLLM's offsets give write P1's 128 bytes at D's conv 48 + 64: past D's state (48 + 128),
    # which misreads reports (it used to assert).
    found = misreads(vllm_reads(prefill, decode), prefill, decode)
    assert any(m.wanted == "beyond the D state" and m.p_rank == 1 for m in found)


@pytest.mark.parametrize("p_tp, d_tp", [(1, 2), (2, 2), (1, 1)])
def test_no_length_mismatch_where_d_sizes_both_descriptors(p_tp, d_tp):
    # tp_ratio >= 1: vLLM reads D's own temporal size from P: lengths agree, the bytes do not.
    prefill, decode = rank_layouts(mamba1("float32"), p_tp), rank_layouts(mamba1("bfloat16"), d_tp)
    assert vllm_length_mismatches(prefill, decode) == []
    assert misreads(vllm_reads(prefill, decode), prefill, decode)      # unit sizes differ: wrong bytes


def test_same_state_p_tp2_d_tp1_has_no_mismatch():
    prefill, decode = rank_layouts(mamba1("bfloat16"), 2), rank_layouts(mamba1("bfloat16"), 1)
    assert vllm_length_mismatches(prefill, decode) == []
    assert misreads(vllm_reads(prefill, decode), prefill, decode) == []


def test_the_reported_line_is_a_verdict_not_an_internal_error():
    # The reproducer as reported: no connector, so vLLM refuses it anyway; it must say so (exit 1).
    result = run_cli("preflight", "--prefill", "vllm serve jamba -tp 2 --mamba-ssm-cache-dtype float32",
                     "--decode", "vllm serve jamba", "--format", "json")
    assert result.code == 1 and "Traceback" not in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "refused"
    assert any(w["code"] == "vllm-length-mismatch" for w in doc["plan_warnings"])


def test_jamba_p_tp2_d_tp1_wider_ssm_dtype_fails_every_transfer():
    p = f"{DS} vllm serve jamba -tp 2 --block-size 144 --mamba-ssm-cache-dtype float32 {P_KV}"
    d = f"{DS} vllm serve jamba --block-size 144 {D_KV}"
    result = run_cli("preflight", "--prefill", p, "--decode", d, "--format", "json")
    assert result.code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "fails" and doc["vllm"]["accepts"] and doc["byte_check"] is None
    # Jamba: I = mamba_expand 2 x hidden 4096 = 8192, d_state 16. D TP 1 bfloat16: 8192 x 16 x 2 B =
    # 262144 bytes, in 2 slices of 131072; P TP 2 float32: 4096 x 16 x 4 B = 262144 bytes per rank.
    assert ("P and D differ in SSM (temporal) dtype (P float32, D bfloat16)" in doc["headline"]
            and "262144 bytes and D reads it into a 131072-byte slice" in doc["headline"])
    assert "length" in doc["byte_check_skipped"]
    codes = [w["code"] for w in doc["plan_warnings"]]
    assert "vllm-length-mismatch" in codes and "vllm-state-differs" not in codes
    assert [(c["side"], c["flag"], c["new"]) for c in doc["fix"]["changes"]] == [
        ("decode", "--mamba-ssm-cache-dtype", "float32")]
    assert doc["fix"]["verdict_after"] == "works"
    table = run_cli("preflight", "--prefill", p, "--decode", d, env={"COLUMNS": "80"})
    assert table.code == 1 and table.stdout.startswith("FAILS: ")
    assert max(map(len, table.stdout.splitlines())) <= 80


def test_jamba_p_tp1_d_tp2_wider_ssm_dtype_corrupts():
    p = f"{DS} vllm serve jamba --block-size 144 --mamba-ssm-cache-dtype float32 {P_KV}"
    d = f"{DS} vllm serve jamba -tp 2 --block-size 144 {D_KV}"
    result = run_cli("preflight", "--prefill", p, "--decode", d, "--format", "json")
    doc = json.loads(result.stdout)
    assert result.code == 1 and doc["verdict"] == "corrupt" and doc["byte_check"]["wrong_bytes"] > 0
    assert "vllm-state-differs" in [w["code"] for w in doc["plan_warnings"]]


# The reported family: every model, dtype flag and P TP > D TP pairing gives a verdict, in process.
@pytest.mark.parametrize("model", ["mamba-130m", "granite-4.0-h-tiny", "nemotron-h-8b", "qwen3.5-0.8b", "jamba"])
@pytest.mark.parametrize("flag", ["--dtype float32", "--mamba-cache-dtype float32", "--mamba-ssm-cache-dtype float32"])
@pytest.mark.parametrize("p_tp, d_tp", [(2, 1), (4, 2), (4, 1)])
def test_every_reported_case_has_a_verdict(model, flag, p_tp, d_tp):
    p = parse_serve(f"{DS} vllm serve {model} -tp {p_tp} {flag} {P_KV}")
    d = parse_serve(f"{DS} vllm serve {model} -tp {d_tp} {D_KV}", "--decode")
    report = preflight(p, d, load_model)
    a = report.assessment
    assert report.verdict in ("refused", "fails", "corrupt", "works")
    assert a.fails == (not a.refused and bool(a.length_mismatches))
    if a.fails:
        assert a.byte_check is None and report.headline().startswith("FAILS: ")


def test_nixl_refuses_descriptor_pairs_of_unequal_length():
    """The fact the FAILS verdict rests on, run on NIXL itself (two agents, DRAM, one process)."""
    np = pytest.importorskip("numpy")
    api = pytest.importorskip("nixl._api")
    a = api.nixl_agent("len-a", api.nixl_agent_config(backends=["UCX"]))
    b = api.nixl_agent("len-b", api.nixl_agent_config(backends=["UCX"]))
    src, dst = np.arange(256, dtype=np.uint8), np.zeros(256, dtype=np.uint8)
    for agent, array in ((a, dst), (b, src)):
        agent.register_memory([(array.ctypes.data, array.nbytes, 0, "")], "DRAM")
    a.add_remote_agent(b.get_agent_metadata())
    local = a.prep_xfer_dlist("NIXL_INIT_AGENT", np.array([[dst.ctypes.data, 64, 0]], dtype=np.uint64), "DRAM")
    remote = a.prep_xfer_dlist("len-b", np.array([[src.ctypes.data, 128, 0]], dtype=np.uint64), "DRAM")
    ids = np.array([0], dtype=np.int32)
    with pytest.raises(Exception) as caught:
        a.make_prepped_xfer("READ", local, ids, remote, ids, b"x")
    assert type(caught.value).__name__ == "nixlInvalidParamError"
