"""vLLM's start-up before its connector: the checks an engine meets before any KV-cache transfer
exists, each named after the vLLM function it follows (docs/reference.md, "Start-up"); asked by
``preflight/refusals.py`` (marked ``# startup:``), in vLLM's order: the parser, then the model config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from mambaxfer_cli.engines.vllm.families import first
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.planning.startup import (
    architecture_names, architectures, attention_heads, parallel_words, removed_words,
)


def vllm_error(model: ModelSpec, tp: int) -> str:
    """vLLM's own words for ``parallel_refusal``."""
    return parallel_words(attention_heads(model), tp)


def _kda(model: ModelSpec) -> bool:
    """A KDA model's class is SupportsReplaySSM, and its RecoverSSM keeps the stock page (its family module's)."""
    return bool(first("kda", model))


MAMBA_BACKENDS = ("triton", "flashinfer", "cpu")     # MambaBackendEnum: --mamba-backend
DEFAULT_REPLAYSSM_BUFFER_LEN = 16                    # CacheConfig.replayssm_buffer_len


@dataclass(frozen=True)
class ReplaySSM:
    """What ``VllmConfig.validate_mamba_cached_kernel`` reads of an engine started with
    ``--use-replayssm``; each release's rule (``Release.replayssm``) says whether it starts."""

    architecture: str                # model_config.architecture ("": the config names none)
    supported: bool                  # model_config.supports_replayssm (the class is SupportsReplaySSM)
    kda: bool                        # a KDA architecture: RecoverSSM when it has speculative tokens
    num_spec: int = 0
    backend: str = "triton"          # --mamba-backend
    buffer_len: int = DEFAULT_REPLAYSSM_BUFFER_LEN   # --replayssm-buffer-len
    cache_mode: str = "align"        # mamba_cache_mode: align with prefix caching, none without
    model_dtype: str = "bfloat16"
    pipeline: int = 1                # --pipeline-parallel-size
    stochastic_rounding: bool = False   # --enable-mamba-cache-stochastic-rounding
    kv_connector: bool = True        # --kv-transfer-config names a connector
    v2_runner: bool = True           # Model Runner V2 (0.33 also runs V1; 0.34 runs V2 only)
    family: str = ""                 # mambaxfer's family label, where the config names no architecture

    @property
    def named(self) -> str:
        """The architecture as vLLM's message names it (``{architecture!r}``)."""
        return repr(self.architecture) if self.architecture else f"of the {self.family} family"

    @property
    def recoverssm(self) -> bool:
        """``use_kda_recoverssm``: a KDA architecture with speculative tokens."""
        return self.kda and self.num_spec > 0


def replayssm_case(model: ModelSpec, **settings: Any) -> ReplaySSM:
    """The model's side of ``validate_mamba_cached_kernel``'s inputs (its architecture, whether its
    class supports ReplaySSM, KDA), with the engine's ``settings`` (the other fields)."""
    archs = architecture_names(model.hf_config)
    return ReplaySSM(archs[0] if archs else "", bool(first("replay_ssm", model)) or _kda(model), _kda(model),
                     **{"num_spec": model.num_spec, "model_dtype": model.model_dtype,
                        "family": model.family or model.name, **settings})


def mamba_cache_mode(prefix_caching: bool, given: str | None) -> str:
    """``MambaModelConfig.verify_and_update_config``: ``align`` with prefix caching (unless the line
    names another mode), ``none`` without it, whatever the line says."""
    if not prefix_caching:
        return "none"
    return given if given not in (None, "none") else "align"


# Every CUDA MLA backend's ``supported_dtypes`` (v1/attention/backends/mla/, 0.33 and 0.34; the
# sparse ones bfloat16 alone): none runs a float32 model.
MLA_DTYPES = ("float16", "bfloat16")


def mla_dtype_refusal(model: ModelSpec, chosen: str | None = None) -> str | None:
    """``CudaPlatform.get_attn_backend_cls`` as an MLA layer is built: a model dtype no MLA backend
    supports ("dtype not supported" from ``validate_configuration``) stops the engine, in its words
    for a backend ``--attention-backend`` names (``chosen``) or for none valid. None where it passes."""
    if not model.mla or model.model_dtype in MLA_DTYPES:
        return None
    said = (f"Selected backend {chosen} is not valid for this configuration. Reason: [..., 'dtype not supported', "
            f"...]" if chosen else
            f"No valid attention backend found for cuda with AttentionSelectorConfig(head_size={model.head_size}, "
            f"dtype=torch.{model.model_dtype}, ..., use_mla=True, ...). Reasons: {{...: [..., dtype not supported, "
            f"...], ...}}.")
    return (f"\"{said}\" (CudaPlatform.get_attn_backend_cls: every CUDA MLA backend runs only "
            f"{' and '.join(MLA_DTYPES)}; --dtype bfloat16 starts it)")


# Refusal codes of the start-up steps, in vLLM's order (the serve line's parser, then
# ModelConfig.verify_with_parallel_config, then the model's attention backend as its layers are
# built): a verdict's first line names the first one met.
STARTUP_CODES = ("unrecognized-arguments", "parallel-config", "attention-backend")


def refused_when(code: str) -> str:
    """When vLLM refuses, by the first refusal's code: at start-up or at handshake."""
    return "at start-up" if code in STARTUP_CODES else "at handshake"


def registry_outcome(archs: Iterable[str], release: str) -> str:
    """What the release's registry makes of a config's architectures: "served", the removed one's
    words (the first listed that it removed), or "not served"."""
    archs = tuple(archs)
    table = architectures(release)
    if any(a in table["served"] for a in archs):
        return "served"
    removed = next((a for a in archs if a in table["removed"]), None)
    return removed_words(removed, table["removed"][removed]) if removed else "not served"
