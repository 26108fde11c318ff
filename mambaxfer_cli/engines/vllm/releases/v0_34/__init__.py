"""vLLM 0.34.0: what its NIXL connector changed from 0.33.0 for Mamba-family P/D transfers (what users
see of each: docs/releases.md).

- ``config/cache.py``: ``DEFAULT_BLOCK_SIZE`` 64; ``nixl/metadata.py``: ``NIXL_CONNECTOR_VERSION`` 16 (hashed
  with the vLLM version, so 0.33 and 0.34 engines refuse each other), no ``parallel_drafting`` hashed.
- ``nixl/base_worker.py``: a group's descriptor IDs cover only the regions holding its layers
  (``_compute_desc_ids``, ``_RegionPairs``); a pull across block sizes pairs blocks from the last token
  (``_pair_blocks_by_last_token``: ``remote_num_tokens``); regions pair by advertised layers
  (``_pair_regions``); ``register_kv_caches`` keys a region by address and block length.
- ``push_worker.py`` ``_validate_remote_parallel_config``: identical kernel blocks on P and D.
- ``engine/arg_utils.py``: new serve flags; ``platforms/interface.py``: ``VLLM_USE_V2_MODEL_RUNNER=0`` stops
  the engine; ``validate_mamba_cached_kernel``: no Model Runner V1, and FlashInfer ReplaySSM takes prefix
  caching (a bfloat16 model) and speculative tokens.
"""

from __future__ import annotations

from dataclasses import replace

from mambaxfer_cli.engines.vllm.release import (
    MAMBA2_SPEC_BACKEND, PUSH, REPLAYSSM_BACKEND, SPECULATIVE_METHODS, Meeting, Refusal, Release,
    attention_free, block_size, compat_hash, dcp_sizes, draft_groups, flashinfer_spec_buffer, head_sharded,
    host_buffer, mla_block_lens, prefix_caching, tp_sizes,
)
from mambaxfer_cli.engines.vllm.releases.v0_33 import RELEASE as V0_33
from mambaxfer_cli.engines.vllm.startup import ReplaySSM


def push_identical_blocks(m: Meeting) -> Refusal | None:
    """``NixlPushConnectorWorker._validate_remote_parallel_config``: P (local) and D must have the
    same kernel block and kernel blocks per logical block."""
    local, remote = (m.local_kernel, m.local_per_logical), (m.remote_kernel, m.remote_per_logical)
    if m.mode != PUSH or not m.has_attention or local == remote:
        return None
    return Refusal("push-block-sizes", (
        "NixlPushConnector requires identical P/D block sizes. Kernel block size and kernel blocks per "
        f"logical block: local {local}, remote engine {m.remote_name} {remote}."))


def advertised_layers(m: Meeting) -> Refusal | None:
    """``_pair_regions``: a 0.33 engine (connector version 15) advertises no layers for Mamba hybrids;
    reached only when the hash, which differs across releases, is not enforced."""
    remote = dict(m.remote_hash).get("NIXL connector version")
    if m.enforce_hash or not isinstance(remote, int) or remote >= 16:   # enforced, the hash refuses first
        return None
    return Refusal("region-layers", f"Engine {m.remote_name} did not advertise the layers of its KV regions.")


def replayssm(c: ReplaySSM) -> str | None:
    """``validate_mamba_cached_kernel`` in 0.34 (``Release.replayssm_rules``; micro-batching, which
    FlashInfer ReplaySSM refuses, is not read)."""
    if c.backend == "flashinfer":
        if c.cache_mode == "align" and c.model_dtype != "bfloat16":
            return ("FlashInfer ReplaySSM align requires bfloat16 model inputs for its replay rings; SSM state "
                    "cache dtype is independent")
        if c.pipeline > 1:
            return "FlashInfer ReplaySSM currently requires pipeline_parallel_size=1"
        return flashinfer_spec_buffer(c) if c.num_spec > 0 else None
    if c.num_spec > 0:
        return MAMBA2_SPEC_BACKEND
    return REPLAYSSM_BACKEND if c.backend != "triton" else None


RELEASE = replace(
    V0_33,
    replayssm_rules=replayssm,
    model_runner_v1=False,
    connector_version=16,
    default_block_size=64,
    pull_checks=(tp_sizes, compat_hash, advertised_layers, draft_groups, block_size, dcp_sizes, prefix_caching,
                 host_buffer, mla_block_lens, head_sharded, attention_free),
    push_checks=(tp_sizes, compat_hash, advertised_layers, push_identical_blocks, draft_groups, block_size,
                 dcp_sizes, prefix_caching, host_buffer, mla_block_lens, head_sharded, attention_free),
    every_region=False,
    hashed_speculative=("method", "model", "kv_cache_dtype"),
    pairs_from_last_token=True,
    speculative_tokens_check="SpeculatorConfig.resolve_num_speculative_tokens",
    speculative_methods=SPECULATIVE_METHODS,
    unknown_method=Release.unknown_method,
    regions_keyed_by_length=True,
    serve_keys=(("kv_transfer_config", "kv_connector_extra_config", "ucx_backend_params"),),
    fatal_env={"VLLM_USE_V2_MODEL_RUNNER": ("0", "VLLM_USE_V2_MODEL_RUNNER=0 is no longer supported: Model "
                                                 "Runner V1 has been removed. Unset this variable.")},
)
