"""Preflight's first room: each ``vllm serve`` line read into the engine its release builds from it
(model, dtypes, geometry and the flags of the transfer)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from mambaxfer_cli.errors import Refused, UserError, reworded
from mambaxfer_cli.engines.vllm.drafts import REFUSES, with_drafts
from mambaxfer_cli.engines.vllm.kv_layout import resolved_layout
from mambaxfer_cli.engines.vllm.startup import startup
from mambaxfer_cli.engines.vllm.engine import GDN
from mambaxfer_cli.engines.vllm.geometry import EngineFlags, kv_cache_dtype as resolve_kv_dtype
from mambaxfer_cli.engines.vllm import families
from mambaxfer_cli.engines.vllm.gpu import (
    default_attention_backend, default_mla_backend, gdn_prefill_backend, run_dtype,
)
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.preflight.report import DECODE, PREFILL
from mambaxfer_cli.proof import CHECK_NUM_BLOCKS
from mambaxfer_cli.engines.vllm.serve_args import ServeLine


KV_ROLES = {PREFILL: ("kv_producer", "kv_both"), DECODE: ("kv_consumer", "kv_both")}
KV_ROLE_FOR = {PREFILL: "kv_producer", DECODE: "kv_consumer"}
VLLM_DTYPES = {"float": "float32", "half": "float16"}


@dataclass(frozen=True)
class ServedEngine:
    """One engine as its vLLM release builds it from its command line on its GPU."""

    side: str                 # prefill | decode
    line: ServeLine
    model: ModelSpec
    flags: EngineFlags
    base: EngineFlags = EngineFlags()   # what the command gave: release, GPU, defaults the line may change
    speculative_refusal: str = ""       # vLLM's words where it refuses the line's --speculative-config

    @property
    def tp(self) -> int:
        return self.line.tp

    @property
    def release(self):
        return self.flags.release

    @property
    def attention_backend(self) -> str:
        """The line's backend, else vLLM's pick for the GPU (an MLA backend for an MLA model)."""
        own = families.first("attention_pick", self.model, self.flags.gpu)     # a family's (sparse MLA) pick
        if own is not None:
            return own
        pick = default_mla_backend if self.model.mla else default_attention_backend
        return self.flags.attention_backend or pick(self.flags.gpu)

    @property
    def conv_layout(self) -> str:
        return self.line.conv_layout or "SD"     # vLLM's default on CUDA when unset

    def summary(self) -> dict:
        m = self.model
        return {"model": self.line.model, "vllm_version": self.release.name, "gpu": self.flags.gpu.spec,
                "tp": self.tp, "dtype": m.model_dtype,
                "kv_cache_dtype": self.flags.kv_cache_dtype, "attention_backend": self.attention_backend,
                "requested_block_size": self.line.block_size, "prefix_caching": self.flags.prefix_caching,
                "conv_dtype": m.conv_dtype, "ssm_dtype": m.ssm_dtype, "num_spec": m.num_spec,
                "conv_rows": m.conv_rows, "conv_layout": self.conv_layout,
                "kv_connector": self.line.kv_connector, "kv_role": self.line.kv_role,
                "transfer_mode": self.line.transfer_mode, "kv_cache_layout": self.kv_cache_layout,
                "kv_buffer_device": self.kv_buffer_device, "hybrid_kv_cache_manager": self.hma,
                "enforce_handshake_compat": self.line.enforce_handshake_compat,
                "gdn_prefill_backend": self.line.gdn_prefill_backend,
                "release_only_flags": [f"{flag} ({', '.join(releases)})" for flag, releases in self.line.release_only]}

    @property
    def kv_cache_layout(self) -> str:
        """The KV-cache layout the engine resolves (``resolve_kv_cache_layout``, ``resolved_layout``)."""
        return resolved_layout(self.model, self.line.kv_cache_layout)

    @property
    def kv_buffer_device(self) -> str:
        return self.line.kv_buffer_device or "cuda"     # kv_buffer_device_default_factory: the platform's

    @property
    def hma(self) -> bool:
        """Whether the hybrid KV-cache manager runs: unless disabled (the NIXL connector supports it)."""
        return not self.line.disable_hybrid_kv_cache_manager

    @property
    def transfer_layout(self) -> str:
        """The layout the engine advertises and transfers in: with a host buffer, an LBNHC device
        cache is staged as LBHNC when enable_permute_local_kv is set (``initialize_host_xfer_buffer``)."""
        if self.kv_buffer_device == "cpu" and self.kv_cache_layout == "LBNHC" and self.line.enable_permute_local_kv:
            return "LBHNC"
        return self.kv_cache_layout


ModelLoader = Callable[..., ModelSpec]


def vllm_dtype(requested: str, config_dtype: str) -> str:
    """``--dtype``: auto is the config's dtype, float32 checkpoints downcast to bfloat16 on GPUs."""
    if requested == "auto":
        return "bfloat16" if config_dtype == "float32" else config_dtype
    return VLLM_DTYPES.get(requested, requested)


def build_engine(side: str, line: ServeLine, load: ModelLoader, base: EngineFlags = EngineFlags()) -> ServedEngine:
    """The engine vLLM builds from ``line``: ``load`` resolves the model as ``--model`` does; ``base``
    gives its release, GPU and what the line leaves unsaid."""
    where = line.origin or f"--{side}"
    try:
        base_model = load(line.model, hf_overrides=line.hf_overrides,
                          startup=startup((base.release.name,), (line.tp,)))
        dtype = run_dtype(vllm_dtype(line.dtype, base_model.model_dtype), line.dtype != "auto", base.gpu)
    except UserError as exc:
        raise reworded(exc, f"{where}: {exc}") from None
    conv = dtype if line.mamba_cache_dtype == "auto" else line.mamba_cache_dtype
    ssm = None if line.mamba_ssm_cache_dtype == "auto" else line.mamba_ssm_cache_dtype
    # --attention-config's indexer_kv_dtype: the QSA compressed keys' dtype (Qwen4Exp only).
    kv = line.attention_config.get("indexer_kv_dtype") if base_model.ple_qsa is not None else None
    model = load(line.model, conv_dtype=conv, ssm_dtype=ssm, num_spec=line.num_speculative_tokens,
                 hf_overrides=line.hf_overrides, startup=startup((base.release.name,)),
                 **({"indexer_kv_dtype": kv} if kv is not None else {}))
    model = replace(model, model_dtype=dtype)
    refused = ""
    try:      # the draft's MTP layers, where mambaxfer models them
        model = with_drafts(model, line.speculative, base.release)
    except Refused as exc:
        refused = str(exc).removeprefix(REFUSES)
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None
    # --gdn-prefill-backend, else --additional-config's; auto leaves vLLM's choice for the GPU (or the command's)
    gdn = (line.gdn_prefill_backend if line.gdn_prefill_backend != "auto" else None) or base.gdn_prefill_backend
    try:
        resolve_kv_dtype(line.kv_cache_dtype, dtype)
        flags = replace(base, attention_backend=line.attention_backend or base.attention_backend,
                        block_size=line.block_size, kv_cache_dtype=line.kv_cache_dtype,
                        prefix_caching=model.has_attention if line.prefix_caching is None else line.prefix_caching,
                        gdn_prefill_backend=gdn, num_blocks=CHECK_NUM_BLOCKS[side], dcp_size=line.dcp)
        if model.variant == GDN and gdn is not None:
            gdn_prefill_backend(flags.gpu, model.params.get("head_k_dim"), gdn)
        flags = families.first("served_flags", model, flags) or flags    # a family's config hook and backend
    except UserError as exc:
        raise reworded(exc, f"{where}: {exc}") from None
    return ServedEngine(side, line, model, flags, base, speculative_refusal=refused)


def pushes(p: ServedEngine, d: ServedEngine) -> bool:
    """Whether the two engines push (NixlPushConnector on both)."""
    return p.line.transfer_mode == "push" and d.line.transfer_mode == "push"
