"""vLLM's start-up before its connector: the checks an engine meets before any KV-cache transfer
exists, each named after the vLLM function it follows (docs/reference.md, "Start-up"); asked by
``preflight/refusals.py`` (marked ``# startup:``), in vLLM's order: the parser, then the model config."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from mambaxfer_cli.engines.vllm.families import first, gathered
from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.families import GENERIC, family_for
from mambaxfer_cli.planning.model import ATTENTION, ModelSpec, Variant
from mambaxfer_cli.planning.layout import RankLayout, check_tp, kv_head_shard, rank_layout, tp_sizes_that_work
from mambaxfer_cli.planning.startup import architecture_names, attention_heads, parallel_refusal
from mambaxfer_cli.planning.variants import VARIANTS

if TYPE_CHECKING:     # the commands that read no model (schema, models) do not load the reader
    from mambaxfer_cli.readers.model_config import AfterLayers, Startup


def vllm_error(model: ModelSpec, tp: int) -> str:
    """vLLM's own words for ``parallel_refusal``."""
    return parallel_words(attention_heads(model), tp)


def parallel_words(heads: int, tp: int) -> str:
    """``ModelConfig.verify_with_parallel_config``'s own words when ``tp`` does not divide ``heads``."""
    return f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})."


def rank_layouts(model: ModelSpec, tp: int) -> tuple[RankLayout, ...]:
    """Every rank of a TP-``tp`` engine; the attention's KV heads must fit ``tp`` too."""
    if refusal := parallel_refusal(model, check_tp(tp)):   # vLLM's config check comes first
        raise Refused(f"vLLM does not start a TP-{tp} engine of {model.name}: {refusal} "
                      f"(ModelConfig.verify_with_parallel_config); TP sizes that work: "
                      f"{tp_sizes_that_work(model)}")
    layouts = tuple(rank_layout(model, tp, rank) for rank in range(tp))
    kv_head_shard(model, tp, 0)
    return layouts


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
    kda = bool(first("kda", model))    # a KDA class is SupportsReplaySSM; its RecoverSSM keeps the stock page
    return ReplaySSM(archs[0] if archs else "", bool(first("replay_ssm", model)) or kda, kda,
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
    """``CudaPlatform.get_attn_backend_cls`` as an MLA layer is built: a model dtype no MLA backend supports
    stops the engine, in its words for the backend ``chosen`` or for none valid. None where it passes."""
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


def family_table(name: str) -> dict[str, Any]:
    """The family modules' tables ``name`` merged (``CONNECTOR_REFUSED``, ``REGISTRATION_REFUSED``,
    ``TRANSFORMERS_BACKEND``: what ``connector_refusal`` and ``startup`` say of them)."""
    return {key: value for found in gathered(name) for key, value in found.items()}


# The backends of the mamba_types in CONNECTOR_REFUSED.
BACKENDS = {"SHORT_CONV": "vllm.v1.attention.backends.short_conv_attn.ShortConvAttentionBackend",
            "LINEAR": "vllm.v1.attention.backends.linear_attn.LinearAttentionBackend"}


def registry_outcome(archs: Iterable[str], release: str) -> str:
    """What the release's registry makes of a config's architectures: "served", the removed one's
    words (the first listed that it removed), or "not served"."""
    archs = tuple(archs)
    table = architectures(release)
    if any(a in table["served"] for a in archs):
        return "served"
    removed = next((a for a in archs if a in table["removed"]), None)
    return removed_words(removed, table["removed"][removed]) if removed else "not served"


def startup(releases: Iterable[str] = (), tp_sizes: Iterable[int] = ()) -> Startup:
    """vLLM's start-up as a config is read (``spec_from_config``'s ``startup``), in its order: the registry
    (of the engines' ``releases``), the heads check at ``tp_sizes``, building the model; and its dtypes."""
    from mambaxfer_cli.engines.vllm.dtypes import dtypes
    from mambaxfer_cli.readers.model_config import Startup

    releases, tp_sizes = tuple(releases), tuple(tp_sizes)

    def check(config: Mapping[str, Any], read: Mapping[str, Any], variant: Variant | None,
              where: str) -> AfterLayers | None:
        archs = architecture_names(config)
        removed = removed_refusal(config)
        if removed and not (archs and archs[0] in family_table("TRANSFORMERS_BACKEND")):
            raise Refused(f"{where}: {removed}")
        unserved = release_refusal(archs, releases) if variant is None else None
        if unserved:
            raise Refused(f"{where}: {unserved}")
        refused = connector_refusal(archs) if variant is None else None
        if refused or removed:
            heads = read.get("num_attention_heads")
            heads = heads if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0 else 0
            # vLLM checks the heads as it builds its config, before the model and its connector exist
            tp = next((tp for tp in tp_sizes if tp > 0 and heads % tp), None)
            said = (f"vLLM does not start a TP-{tp} engine: \"{parallel_words(heads, tp)}\" "
                    f"(ModelConfig.verify_with_parallel_config)") if tp else refused
            if said:
                raise Refused(f"{where}: {said}")
        model_type = str(read.get("model_type", ""))
        known = family_for(model_type)
        named = variant if variant is not None else known.variant if known is not None else None
        rules = VARIANTS[named] if named is not None else None
        backend = rules.backend if rules is not None else ""
        if rules is not None and (backend == "SHORT_CONV" or (backend == "LINEAR" and variant is not None)):
            said = f"--variant {variant}" if variant is not None else f"model_type '{model_type}'"
            kind = "a short-conv" if backend == "SHORT_CONV" else f"a {rules.title}"
            raise UserError(f"{where}: {said} is {kind} state, which vLLM's NIXL connector refuses "
                            f"(derive_mamba_conv_split); mambaxfer answers for it under --engine sglang")
        if variant is None and archs and not served_anywhere(archs):
            if releases and known is not None and not removed:     # a family only another engine serves
                raise Refused(f"{where}: no vLLM release mambaxfer knows serves {archs[0]}: \"Model architectures "
                              f"{list(archs)} are not supported for now\" (_ModelRegistry._raise_for_unsupported)")
            from mambaxfer_cli.readers.model_config import detect

            guess = detect(read, None, where)
            if guess is GENERIC[guess.variant]:    # a family guessed from its keys, not vLLM's to move
                raise UserError(
                    f"{where}: no vLLM release mambaxfer knows serves {archs[0]} (model_type "
                    f"'{str(read.get('model_type', ''))}'), so its state is not vLLM's to move; --variant "
                    f"{guess.variant.value} plans it as a "
                    f"{guess.label.removeprefix('generic ').removesuffix(' (guessed)')} model, guessed from its keys")
        own = model_type if known is not None and variant in (None, known.variant) else ""

        def built(layers: Sequence[str]) -> None:
            """The Transformers backend stops at the first layer that is not attention; a family's
            attention layers meet its refusals (``attention_refusal``)."""
            if removed:
                layer = next(i for i, kind in enumerate(layers) if kind != ATTENTION)
                named = family_table("TRANSFORMERS_BACKEND")[archs[0]]
                raise Refused(f"{where}: {removed_refusal(config, layer, named)}")
            if ATTENTION in layers:
                first("attention_refusal", own, read, where)
        return built
    return Startup(check, dtypes)


def connector_refusal(architectures: Sequence[str]) -> str | None:
    """vLLM's own error where its NIXL connector refuses the architecture's state (None: it does not)."""
    registration, connector = family_table("REGISTRATION_REFUSED"), family_table("CONNECTOR_REFUSED")
    for arch in architectures:
        if arch in registration:
            return (f"vLLM 0.34 serves {registration[arch]} ({arch}), but its NIXL connector refuses its "
                    f"KV cache when each worker registers it: AssertionError: KV cache view cannot be partitioned into "
                    f"NIXL regions (register_kv_caches, after _sync_block_size_with_kernel takes the DSA "
                    f"indexer's 64-token kernel block for the packed block rows)")
    for arch in architectures:
        if arch in connector:
            label, member = connector[arch]
            return (f"vLLM serves {label} ({arch}), but its NIXL connector refuses its state when the decode "
                    f"worker starts: NotImplementedError: Conv transfer only supports Mamba1, Mamba2 and GDN "
                    f"models, got mamba_type=<MambaAttentionBackendEnum.{member}: '{BACKENDS[member]}'>. "
                    f"(derive_mamba_conv_split)")
    return None


# --- the architecture each release serves (model_executor/models/registry.py) --------------------

RELEASES_DIR = Path(__file__).parent / "releases"


@lru_cache(maxsize=None)
def architectures(release: str) -> dict[str, Any]:
    """The release's registry tables: ``served`` architectures, ``removed`` -> the last release
    that served it (``scripts/vllm_architectures.py`` extracts them from the wheel)."""
    folder = RELEASES_DIR / f"v{release.replace('.', '_')}"
    table: dict[str, Any] = json.loads((folder / "architectures.json").read_text())
    return table


@lru_cache(maxsize=None)
def known_releases() -> tuple[str, ...]:
    """Every vLLM release mambaxfer models, by name, oldest first: the ``v<major>_<minor>`` folders
    of ``releases/`` (read as files: their modules import this one)."""
    found = sorted((int(m.group(1)), int(m.group(2))) for path in RELEASES_DIR.iterdir()
                   if (m := re.fullmatch(r"v(\d+)_(\d+)", path.name)) and (path / "architectures.json").is_file())
    return tuple(f"{major}.{minor}" for major, minor in found)


def removed_refusal(config: Mapping[str, Any], layer: int | None = None, layer_type: str = "") -> str | None:
    """``_ModelRegistry._raise_for_unsupported`` on an architecture the newest release without it removed; with
    ``layer``, where the Transformers backend that takes it stops (``layer_type``). None where a release serves it."""
    archs = architecture_names(config)
    for release in reversed(known_releases()):
        table = architectures(release)
        if not archs or any(a in table["served"] for a in archs):
            return None
        arch = next((a for a in archs if a in table["removed"]), None)
        if arch is None:
            continue
        last = table["removed"][arch]
        words = f"\"{removed_words(arch, last)}\" (_ModelRegistry._raise_for_unsupported)"
        if layer is None:
            return f"vLLM {release} does not serve {arch}: {words}"
        return (f"vLLM {release}'s registry removed {arch} (served until v{last}); under --model-impl auto "
                f"(the default) its Transformers backend takes it (_try_resolve_transformers) and stops building "
                f"the model: \"Layer {layer} ({layer_type}) does not dispatch through the Transformers attention "
                f"interface and vLLM has no other way to handle it.\" (_create_attention_instances); with "
                f"--model-impl vllm: {words}")
    return None


def release_refusal(archs: Iterable[str], releases: Iterable[str]) -> str | None:
    """``_ModelRegistry._raise_for_unsupported`` in one of ``releases`` without the architecture where another
    release serves it. None where each serves it, or none does (the reader refuses or guesses those)."""
    archs = tuple(archs)
    if not archs or not served_anywhere(archs):
        return None
    for release in releases:
        words = registry_outcome(archs, release)
        if words != "served":
            words = f"Model architectures {list(archs)} are not supported for now" if words == "not served" else words
            others = [r for r in known_releases() if registry_outcome(archs, r) == "served"]
            return (f"vLLM {release} does not serve {archs[0]}: \"{words}\" "
                    f"(_ModelRegistry._raise_for_unsupported); vLLM {' and '.join(others)} serves it")
    return None


def removed_words(arch: str, last: str) -> str:
    """The first sentence of ``_ModelRegistry._raise_for_unsupported`` on a removed architecture."""
    return f"Model architecture {arch} was supported in vLLM until v{last}, and is not supported anymore"


def served_anywhere(archs: Iterable[str]) -> bool:
    """Whether some release's registry serves one of ``archs``."""
    wanted = set(archs)
    return any(wanted.intersection(architectures(release)["served"]) for release in known_releases())
