"""vLLM's start-up before its connector: the checks an engine meets before any KV-cache transfer
exists. Each rule names the vLLM function it follows (docs/reference.md, "Start-up").

Hooks (marked ``# startup:``): ``planning/layout.py`` (TP sizes), ``engines/vllm/preflight/refusals.py`` (the
serve line's flags, the parallel config), in vLLM's order: the parser, then the model config.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

from mambaxfer_cli.planning.model import ModelSpec


def attention_heads(model: ModelSpec) -> int:
    """``total_num_attention_heads`` as vLLM's arch-config reads it: the config's
    ``num_attention_heads``, 0 where it has none (a pure-Mamba model)."""
    return model.num_q_heads or 0


def parallel_refusal(model: ModelSpec, tp: int) -> str | None:
    """``ModelConfig.verify_with_parallel_config``'s first check: the attention heads must divide
    by the TP size, or the engine does not start (ValueError). None where it passes."""
    heads = attention_heads(model)
    if heads % tp:
        return f"{heads} attention heads do not divide by TP {tp}"
    return None


def vllm_error(model: ModelSpec, tp: int) -> str:
    """vLLM's own words for ``parallel_refusal``."""
    heads = attention_heads(model)
    return (f"Total number of attention heads ({heads}) must be divisible by tensor parallel size "
            f"({tp}).")


# The architectures whose class is SupportsReplaySSM (nemotron_h.py; 0.34 adds nano_nemotron_vl.py),
# by the family label mambaxfer reads, and KDA's, whose RecoverSSM keeps the stock page.
REPLAYSSM_FAMILIES = ("Nemotron-H",)
KDA_ARCHITECTURES = ("KimiLinearForCausalLM", "KimiK3ForConditionalGeneration", "KimiK31ForConditionalGeneration")


KDA_FAMILIES = ("Kimi-Linear", "Kimi-K3")      # the family labels of KDA_ARCHITECTURES' models


def _kda(model: ModelSpec) -> bool:
    return any(a in KDA_ARCHITECTURES for a in architecture_names(model.hf_config)) or model.family in KDA_FAMILIES


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
    return ReplaySSM(archs[0] if archs else "", model.family in REPLAYSSM_FAMILIES or _kda(model), _kda(model),
                     **{"num_spec": model.num_spec, "model_dtype": model.model_dtype,
                        "family": model.family or model.name, **settings})


def mamba_cache_mode(prefix_caching: bool, given: str | None) -> str:
    """``MambaModelConfig.verify_and_update_config``: ``align`` with prefix caching (unless the line
    names another mode), ``none`` without it, whatever the line says."""
    if not prefix_caching:
        return "none"
    return given if given not in (None, "none") else "align"


# Refusal codes of the start-up steps, in vLLM's order (the serve line's parser, then
# ModelConfig.verify_with_parallel_config, then the model's attention backend as its layers are
# built): a verdict's first line names the first one met.
STARTUP_CODES = ("unrecognized-arguments", "parallel-config", "attention-backend")


# --- the architecture each release serves (model_executor/models/registry.py) --------------------

RELEASES_DIR = Path(__file__).parent.parent / "engines" / "vllm" / "releases"


@lru_cache(maxsize=None)
def architectures(release: str) -> dict[str, Any]:
    """The release's registry tables: ``served`` architectures, ``removed`` -> the last release
    that served it (``scripts/vllm_architectures.py`` extracts them from the wheel)."""
    folder = RELEASES_DIR / f"v{release.replace('.', '_')}"
    table: dict[str, Any] = json.loads((folder / "architectures.json").read_text())
    return table


def architecture_names(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The config's ``architectures`` that are names; none where it is not a list (a config may
    hold anything there)."""
    found = config.get("architectures")
    return tuple(a for a in found if isinstance(a, str)) if isinstance(found, (list, tuple)) else ()


@lru_cache(maxsize=None)
def known_releases() -> tuple[str, ...]:
    """Every vLLM release mambaxfer models, by name, oldest first: the ``v<major>_<minor>`` folders
    of engines/vllm/releases (read as files: the planning core imports no engine)."""
    found = sorted((int(m.group(1)), int(m.group(2))) for path in RELEASES_DIR.iterdir()
                   if (m := re.fullmatch(r"v(\d+)_(\d+)", path.name)) and (path / "architectures.json").is_file())
    return tuple(f"{major}.{minor}" for major, minor in found)


def removed_refusal(config: Mapping[str, Any], releases: Iterable[str] | None = None) -> str | None:
    """``_ModelRegistry._raise_for_unsupported``: an architecture the registry removed. Under
    ``--model-impl vllm`` vLLM stops with this error; under ``auto`` or ``transformers`` it falls
    back to its Transformers backend (``_try_resolve_transformers``), which keeps no Mamba state,
    so the NIXL connector has no SSM state to move. None where a release serves it."""
    archs = architecture_names(config)
    for release in reversed(tuple(releases or known_releases())):
        table = architectures(release)
        if not archs or any(a in table["served"] for a in archs):
            return None
        for arch in archs:
            if arch in table["removed"]:
                return (f"vLLM {release} does not serve {arch}: \"{removed_words(arch, table['removed'][arch])}\" "
                        f"(_ModelRegistry._raise_for_unsupported; with --model-impl auto or transformers its "
                        f"Transformers backend runs it with no Mamba state to transfer)")
    return None


def release_refusal(archs: Iterable[str], releases: Iterable[str]) -> str | None:
    """``_ModelRegistry._raise_for_unsupported`` in a release that does not have the architecture
    while another release's registry does (Kimi-K3.1, Zaya and LFM3 are 0.34's only): vLLM stops
    there (its Transformers backend has no such model either). None where every release in
    ``releases`` serves it, or no release does (the reader refuses or guesses those)."""
    archs = tuple(archs)
    if not archs or not served_anywhere(archs):
        return None
    for release in releases:
        table = architectures(release)
        if set(archs).intersection(table["served"]):
            continue
        removed = next((a for a in archs if a in table["removed"]), None)
        words = (removed_words(removed, table["removed"][removed]) if removed else
                 f"Model architectures {list(archs)} are not supported for now")
        others = [r for r in known_releases() if set(archs).intersection(architectures(r)["served"])]
        return (f"vLLM {release} does not serve {archs[0]}: \"{words}\" (_ModelRegistry._raise_for_unsupported); "
                f"vLLM {' and '.join(others)} serves it")
    return None


def removed_words(arch: str, last: str) -> str:
    """The first sentence of ``_ModelRegistry._raise_for_unsupported`` on a removed architecture."""
    return f"Model architecture {arch} was supported in vLLM until v{last}, and is not supported anymore"


def registry_outcome(archs: Iterable[str], release: str) -> str:
    """What the release's registry makes of a config's architectures: "served", the removed one's
    words (the first listed that it removed), or "not served"."""
    archs = tuple(archs)
    table = architectures(release)
    if any(a in table["served"] for a in archs):
        return "served"
    removed = next((a for a in archs if a in table["removed"]), None)
    return removed_words(removed, table["removed"][removed]) if removed else "not served"


def served_anywhere(archs: Iterable[str]) -> bool:
    """Whether some release's registry serves one of ``archs``."""
    wanted = set(archs)
    return any(wanted.intersection(architectures(release)["served"]) for release in known_releases())
