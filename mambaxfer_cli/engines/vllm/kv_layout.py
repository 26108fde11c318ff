"""The KV-cache layout a vLLM engine runs under the NIXL connector (``resolve_kv_cache_layout``),
and the words it stops with when ``VLLM_KV_CACHE_LAYOUT`` names one it cannot run."""

from __future__ import annotations

from mambaxfer_cli.engines.vllm import families
from mambaxfer_cli.engines.vllm.release import Refusal
from mambaxfer_cli.planning.model import ModelSpec

LAYOUT_ALIASES = {"NHD": "LBNHC", "HND": "LBHNC"}                   # config/cache.py _LAYOUT_COMPAT_ALIASES
ENV_LAYOUTS = ("LBNHC", "LBHNC", "LHBNC", "NHD", "HND", "BLHNC", "BLNHC", "BHLNC")   # envs.py's choices
# attention/backends/utils.py _DEFAULT_LAYOUT_PREFERENCE: what the engine may resolve when no backend
# declares layouts (FLASH_ATTN, TRITON_ATTN, FlashInfer before Blackwell, the Mamba backends)
DEFAULT_LAYOUTS = ("LBNHC", "LBHNC", "BLNHC", "BLHNC", "BHLNC", "LHBNC")
BLOCK_COMPACT = ("LBHNC", "LBNHC", "BLHNC", "BLNHC")     # KVCacheLayout.is_block_compact: L and B outermost
BLOCK_CONTIGUOUS = ("LBHNC", "BLHNC")                    # KVCacheLayout.is_block_contiguous: [H, N, C] last
CONNECTOR_LAYOUT = "LBHNC"                               # NixlConnector.get_required_kvcache_layout, MLA aside


def layout_candidates(model: ModelSpec) -> tuple[str, ...]:
    """The layouts ``resolve_kv_cache_layout`` may pick: those the model's backends declare, else vLLM's
    default preference (a hybrid's Mamba and attention specs leave only block-compact ones)."""
    declared = families.first("layouts", model)
    if declared is not None:
        return declared
    return tuple(x for x in DEFAULT_LAYOUTS if x in BLOCK_COMPACT) if model.has_attention else DEFAULT_LAYOUTS


def resolved_layout(model: ModelSpec, requested: str | None) -> str:
    """The layout the engine runs: ``VLLM_KV_CACHE_LAYOUT``, else the connector's LBHNC (none for MLA) where
    the model's backends allow it, else the first they allow. ``layout_error`` says when the engine stops."""
    if requested is not None:
        return LAYOUT_ALIASES.get(requested, requested)
    allowed = layout_candidates(model)
    connector = None if model.mla else CONNECTOR_LAYOUT
    return connector if connector in allowed else allowed[0]


def contiguous_layout(model: ModelSpec) -> str:
    """The block-contiguous layout an engine of ``model`` can run (the heads of a block together,
    which heterogeneous TP needs): LBHNC, or BLHNC for Qwen4Exp's QSA."""
    return next(x for x in layout_candidates(model) if x in BLOCK_CONTIGUOUS)


def heads_refusal(model: ModelSpec, local_tp: int, remote_tp: int, layout: str,
                  permute: bool = False) -> Refusal | None:
    """``_validate_remote_agent_handshake`` after its block checks: heads split across TP sizes need a
    block-contiguous layout (unless MLA, replicated KV heads, or ``enable_permute_local_kv``)."""
    if (local_tp == remote_tp or not model.has_attention or model.mla or remote_tp > (model.num_kv_heads or 0)
            or layout in BLOCK_CONTIGUOUS or permute):
        return None
    return Refusal("kv-cache-layout-heads", (
        "Heterogeneous TP head-dimension splitting requires contiguous heads. Use a block-contiguous "
        "layout (e.g. LBHNC) on the prefill side."))


def layout_error(model: ModelSpec, requested: str | None) -> str | None:
    """vLLM's words where ``VLLM_KV_CACHE_LAYOUT`` stops the engine at start-up (``envs.py``'s
    choices, then ``resolve_kv_cache_layout``); None where it runs."""
    if requested is None:
        return None
    from mambaxfer_cli.engines.vllm.serve_args import KV_LAYOUT_VAR     # the serve line's reader: not for plan

    if requested not in ENV_LAYOUTS:
        return f"Invalid value '{requested}' for {KV_LAYOUT_VAR}. Valid options: {list(ENV_LAYOUTS)}."
    allowed = layout_candidates(model)
    if resolved_layout(model, requested) not in allowed:
        return f"{KV_LAYOUT_VAR}={requested} does not satisfy every supported set; valid layouts: {list(allowed)}."
    return None
