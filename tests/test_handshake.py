"""vLLM's handshake verdict and attention sources (``compute_tp_mapping``), for each release where
they agree (what differs between releases: tests/test_releases.py)."""

from __future__ import annotations

from math import gcd

import pytest
from hypothesis import assume, given, settings, strategies as st

from mambaxfer_cli.engines.vllm.attention import head_sources
from mambaxfer_cli.engines.vllm.proof.check import check_plan
from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.engines.vllm.handshake import attention_sources
from mambaxfer_cli.readers.model_source import load_model
from mambaxfer_cli.engines.vllm.plan import PlanOptions, build_plan
from mambaxfer_cli.engines.vllm.releases import RELEASES, release
from strategies import pairings

V0_33 = release("0.33")


def plan(model: str, p_tp: int, d_tp: int, semantics: str = "vllm", **flags):
    engine = EngineFlags(num_blocks=4096, **flags)
    return build_plan(load_model(model), p_tp, d_tp, PlanOptions(semantics=semantics, prefill=engine, decode=engine))


@pytest.mark.parametrize("rel", RELEASES)
def test_qwen35_p_tp1_d_tp4_is_refused_with_vllms_message_and_the_fix(rel):
    # Default flags give 576 and 320 tokens in both releases (test_releases.py); --block-size 144:
    # kba = lcm(144, 64) = 576 on both sides.
    p = plan("qwen3.5-0.8b", 1, 4, release=rel)
    assert not p.verdict.accepts
    assert [r.to_dict() for r in p.verdict.refusals] == [{
        "code": "block-size",
        "message": "Local block size 320 is not divisible by remote block size 576 or vice versa."}]
    assert p.verdict.suggested_block_size == 144
    fixed = plan("qwen3.5-0.8b", 1, 4, release=rel, block_size=144)
    assert fixed.verdict.accepts and fixed.prefill.kernel_tokens == fixed.decode.kernel_tokens == 576
    # Refused under vllm semantics: check says so and fails; fixed, it passes byte by byte.
    result = check_plan(p)
    assert result.verdict == "refused" and "fix: --block-size 144 on both engines" in result.explanation()
    assert check_plan(fixed).verdict == "pass"


def test_spec_example_prefix_caching_off_is_refused_too():
    # vLLM 0.33, docs/reference.md's example: 544 and 272 tokens.
    p = plan("qwen3.5-0.8b", 1, 4, release=V0_33, prefix_caching=False)
    assert p.verdict.refusals[0].message == ("Local block size 272 is not divisible by remote block size 544 "
                                             "or vice versa.")


@pytest.mark.parametrize("rel", RELEASES)
def test_prefix_caching_with_unequal_blocks_per_logical_is_refused(rel):
    p = plan("qwen3.5-0.8b", 1, 4, release=rel, attention_backend="FLASHINFER")   # 64-token kernels: 9 and 5
    assert [r.code for r in p.verdict.refusals] == ["prefix-caching"]
    assert p.verdict.refusals[0].message == (
        "Prefix caching with heterogeneous physical_blocks_per_logical is not supported for Mamba hybrid "
        "models. Local: 5, Remote: 9. Disable prefix caching with --disable-prefix-caching.")
    assert plan("qwen3.5-0.8b", 1, 4, release=rel, attention_backend="FLASHINFER",
                block_size=p.verdict.suggested_block_size).verdict.accepts


def test_tp_sizes_that_do_not_divide_are_refused():
    p = plan("mamba-130m", 2, 3, semantics="exact")
    # TransferTopology.tp_ratio first; once the TP sizes divide, add_remote_agent's next() over the
    # attention groups (_build_fa_remote: D TP 3 >= P TP 2) still stops a model without attention.
    assert [r.to_dict() for r in p.verdict.refusals] == [{
        "code": "tp-sizes", "message": "Local tensor parallel size 3 is not divisible by remote tensor "
                                       "parallel size 2."}, {
        "code": "no-attention", "message": "vLLM's NIXL connector cannot transfer a model without attention "
                                           "layers: _build_fa_remote raises StopIteration (its next() finds no "
                                           "attention KV-cache group), so the handshake never completes."}]
    assert [w.code for w in p.warnings] == ["vllm-refuses"]


def test_kv_cache_dtype_mismatch_fails_the_compatibility_hash_but_the_attention_backend_does_not():
    spec = load_model("jamba")
    p = build_plan(spec, 1, 1, PlanOptions(prefill=EngineFlags(kv_cache_dtype="fp8"), decode=EngineFlags()))
    assert [r.code for r in p.verdict.refusals][0] == "compat-hash"     # vLLM stops there; fp8 also halves a1
    # Jamba's first layer is an SSM layer: the hash takes its backend, not the attention's.
    q = build_plan(spec, 1, 1, PlanOptions(prefill=EngineFlags(attention_backend="TRITON_ATTN"), decode=EngineFlags()))
    assert q.verdict.accepts and q.prefill.hashed_backend == "MAMBA1_ATTN"


def test_accepted_sub_block_reads_pass_where_vllm_accepts_them():
    # 4P2D without prefix caching, vLLM 0.33: P's 272-token kernel blocks read whole into halves of
    # D's 544-token ones (one KV head per D rank), rearranged on receipt: the right bytes.
    p = plan("qwen3.5-0.8b", 4, 2, release=V0_33, prefix_caching=False)
    assert p.verdict.accepts and (p.prefill.kernel_tokens, p.decode.kernel_tokens) == (272, 544)
    assert p.received_sub_blocks == 2 and "vllm-attention-heads" not in [w.code for w in p.warnings]
    assert check_plan(p).verdict == "pass"
    # 8P1D (two sources of attention for D0) is refused instead; exact semantics moves the tokens.
    assert [r.code for r in plan("qwen3.5-0.8b", 8, 1).verdict.refusals] == ["head-sharded-block-size"]
    assert check_plan(plan("qwen3.5-0.8b", 8, 1, semantics="exact")).verdict == "pass"


# --- attention sources ----------------------------------------------------------

@pytest.mark.parametrize("model,p_tp,d_tp", [("qwen3.5-0.8b", 4, 4), ("qwen3.5-0.8b", 4, 8),
                                             ("qwen3.5-0.8b", 8, 4), ("qwen3-next-80b", 8, 8)])
def test_vllm_reads_attention_from_its_ssm_source_when_d_tp_is_at_least_p_tp(model, p_tp, d_tp):
    for semantics in ("vllm", "exact"):
        p = plan(model, p_tp, d_tp, semantics=semantics)
        for d_rank in range(d_tp):
            reads = [r for r in p.descriptors.reads if r.d_rank == d_rank]
            ssm_sources = {r.p_rank for r in p.reads if r.d_rank == d_rank}
            # Never a READ for attention alone.
            assert {r.p_rank for r in reads} == ssm_sources, (semantics, d_rank)
            if semantics == "vllm" and d_tp >= p_tp:
                assert [r.p_rank for r in reads if r.attention] == [d_rank * p_tp // d_tp]


def test_compute_tp_mapping_takes_the_first_rank_of_each_head():
    p = plan("qwen3.5-0.8b", 4, 1)          # 2 KV heads: P ranks 0, 1 hold head 0; ranks 2, 3 head 1
    assert attention_sources(p.prefill, p.decode, 0) == [0, 2]
    assert sorted(head_sources(p.prefill, p.decode, 0, {0, 1, 2, 3}, "vllm")) == [0, 2]
    p = plan("qwen3.5-0.8b", 4, 4)
    assert [attention_sources(p.prefill, p.decode, d) for d in range(4)] == [[0], [1], [2], [3]]
    # Exact semantics prefers the rank already read for SSM state (D1 <- P1, not P0).
    assert head_sources(p.prefill, p.decode, 1, {1}, "exact") == {1: p.decode.kv_heads[1]}


# --- properties ---------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(pairings(max_tp=4, attention=True), st.sampled_from(["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN"]),
       st.booleans(), st.sampled_from([16, 32, 48, 64, None]), st.sampled_from(RELEASES))
def test_derived_geometry_invariants(case, backend_name, prefix, block_size, rel):
    model, p_tp, d_tp = case
    assume(model.has_attention)
    if model.mla:       # the MLA backend of each kind
        backend_name = {"FLASH_ATTN": "FLASH_ATTN_MLA", "FLASHINFER": "FLASHINFER_MLA"}.get(backend_name, "TRITON_MLA")
    flags = EngineFlags(attention_backend=backend_name, prefix_caching=prefix, block_size=block_size,
                        num_blocks=2048, release=rel)
    try:
        p = build_plan(model, p_tp, d_tp, PlanOptions(prefill=flags, decode=flags))
    except Exception as exc:   # FLASHINFER kernels that divide no block are a user error, nothing else
        assert "none of which divides" in str(exc) or "does not fit an engine" in str(exc), exc
        return
    for side in (p.prefill, p.decode):
        g = side.geometry
        # The SSM state is padded to exactly the attention page, a whole number of kernel blocks.
        assert g.page_bytes == g.block_size * g.attention_bytes_per_token >= g.state_bytes
        assert g.block_size % g.kernel_block_size == 0
        assert g.blocks_per_logical == g.block_size // g.kernel_block_size
        assert g.block_size >= (block_size or rel.default_block_size) and g.block_size % 16 == 0
    pg, dg = p.prefill.geometry, p.decode.geometry
    same_kernel = pg.kernel_block_size == dg.kernel_block_size
    same_ratio = pg.blocks_per_logical == dg.blocks_per_logical
    geometry_refused = {r.code for r in p.verdict.refusals} & {"block-size", "prefix-caching",
                                                              "head-sharded-block-size"}
    if same_kernel and (same_ratio or not prefix):
        assert not geometry_refused
    assert gcd(pg.kernel_block_size, dg.kernel_block_size) >= 16
