"""vLLM 0.33.0: the rules of its NIXL connector for Mamba-family P/D transfers.

Sources (vLLM 0.33.0 wheel): ``config/cache.py`` ``CacheConfig.DEFAULT_BLOCK_SIZE = 16``;
``distributed/kv_transfer/kv_connector/v1/nixl/metadata.py`` ``NIXL_CONNECTOR_VERSION = 15`` and
``compute_nixl_compatibility_hash`` (speculative factors with ``parallel_drafting``);
``nixl/base_worker.py`` ``_compute_desc_ids`` (every group's IDs over every region of its kind),
``add_remote_agent`` (the handshake's order; ``_build_local_splits_from_plan`` and ``_build_fa_remote``
look up an attention KV-cache group with ``next()``, so a model without attention never completes
it), ``config/speculative.py`` ``MTPModelTypes``, ``config/vllm.py``
``VllmConfig.validate_mamba_cached_kernel`` (``--use-replayssm``).
"""

from __future__ import annotations

from mambaxfer_cli.engines.vllm.release import (
    MAMBA2_SPEC_BACKEND, REPLAYSSM_BACKEND, SPECULATIVE_METHODS, Release, attention_free, block_size,
    compat_hash, dcp_sizes, draft_regions, flashinfer_spec_buffer, head_sharded, host_buffer, mla_block_lens,
    prefix_caching, tp_sizes,
)
from mambaxfer_cli.engines.vllm.startup import ReplaySSM

# SpeculativeConfig: these method names are deprecated aliases of "mtp"; a family module's
# MTP_METHODS adds its own.
MTP_METHODS = frozenset((
    "deepseek_mtp", "dots3_note_mtp", "ernie_mtp", "exaone4_5_mtp", "exaone_moe_mtp", "gemma4_mtp",
    "glm4_moe_lite_mtp", "glm4_moe_mtp", "glm_ocr_mtp", "hy_v3_mtp", "hy_v4_mtp", "inkling_mtp",
    "longcat_flash_mtp", "mimo_mtp", "mimo_v2_mtp", "minimax_m3_mtp", "mtp", "pangu_ultra_moe_mtp", "qwen3_5_mtp",
    "qwen3_next_mtp", "step3p5_mtp", "step5_mtp",
))

# D's handshake when it pulls: the TP sizes (before any metadata), the hash, then add_remote_agent's
# block_size_ratio, _validate_remote_agent_handshake (DCP sizes with Mamba layers, prefix caching, host
# buffer, hybrid MLA block lengths),
# _build_local_splits_from_plan (head-sharded reads) and the next() over attention groups there and
# in _build_fa_remote (a model without attention). Push runs the same checks on P.
CHECKS = (tp_sizes, compat_hash, block_size, dcp_sizes, prefix_caching, host_buffer, draft_regions, mla_block_lens,
          head_sharded, attention_free)


def replayssm(c: ReplaySSM) -> str | None:
    """``validate_mamba_cached_kernel`` in 0.33 (``Release.replayssm_rules``): triton ReplaySSM runs on
    Model Runner V1 only."""
    if c.num_spec > 0:
        if c.cache_mode != "none":
            return ("FlashInfer ReplaySSM speculative decoding does not support prefix caching; use "
                    "--disable-prefix-caching")
        return flashinfer_spec_buffer(c) or (MAMBA2_SPEC_BACKEND if c.backend != "flashinfer" else None)
    if c.backend == "flashinfer":
        if c.cache_mode == "align":
            return "FlashInfer ReplaySSM does not support prefix caching yet; use --disable-prefix-caching"
        return None
    if c.backend != "triton":
        return REPLAYSSM_BACKEND
    if c.v2_runner:
        return "Triton ReplaySSM requires Model Runner V1; use --mamba-backend flashinfer or Model Runner V1"
    return None


RELEASE = Release(
    connector_version=15,
    default_block_size=16,
    pull_checks=CHECKS,
    push_checks=CHECKS,
    hashed_speculative=("method", "model", "parallel_drafting", "kv_cache_dtype"),
    mtp_methods=MTP_METHODS,
    replayssm_rules=replayssm,
    speculative_methods=SPECULATIVE_METHODS + ("custom_class",),
    unknown_method="\"1 validation error for SpeculativeConfig method: Input should be 'ngram', 'draft_model', "
                   "'suffix', 'custom_class', ...\" (SpeculativeConfig.method, a Literal; {!r} is none of them)",
)
