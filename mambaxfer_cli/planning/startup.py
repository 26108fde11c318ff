"""What the core reads of a model's start-up: its architectures, the attention heads a TP size
must divide (``ModelConfig.verify_with_parallel_config``, which ``planning/layout.py`` follows),
and which vLLM release's registry serves the architecture (the reader refuses a model none
serves). vLLM's other start-up checks live in ``engines/vllm/startup.py``.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

from mambaxfer_cli.planning.model import ModelSpec


def attention_heads(model: ModelSpec) -> int:
    """``total_num_attention_heads`` as vLLM's arch-config reads it: the config's
    ``num_attention_heads``, 0 where it has none (a pure-Mamba model)."""
    return model.num_q_heads or 0


def parallel_words(heads: int, tp: int) -> str:
    """``ModelConfig.verify_with_parallel_config``'s own words when ``tp`` does not divide ``heads``."""
    return f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})."


def heads_first(heads: int, tp_sizes: Iterable[int]) -> str | None:
    """The heads check at the first of ``tp_sizes`` that does not divide ``heads``: vLLM meets it as
    it builds its config, before the model and its connector exist, so it stops the engine ahead
    of any refusal those meet. None where every size divides."""
    tp = next((tp for tp in tp_sizes if tp > 0 and heads % tp), None)
    return None if tp is None else (f"vLLM does not start a TP-{tp} engine: \"{parallel_words(heads, tp)}\" "
                                    f"(ModelConfig.verify_with_parallel_config)")


def parallel_refusal(model: ModelSpec, tp: int) -> str | None:
    """``ModelConfig.verify_with_parallel_config``'s first check: the attention heads must divide
    by the TP size, or the engine does not start (ValueError). None where it passes."""
    heads = attention_heads(model)
    if heads % tp:
        return f"{heads} attention heads do not divide by TP {tp}"
    return None


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


def removed_in(config: Mapping[str, Any], releases: Iterable[str] | None = None) -> tuple[str, str, str] | None:
    """(release, architecture, the last release that served it) where the newest of ``releases``
    that has none of the config's architectures removed one (``_PREVIOUSLY_SUPPORTED_MODELS``)."""
    archs = architecture_names(config)
    for release in reversed(tuple(releases or known_releases())):
        table = architectures(release)
        if not archs or any(a in table["served"] for a in archs):
            return None
        for arch in archs:
            if arch in table["removed"]:
                return release, arch, table["removed"][arch]
    return None


def removed_refusal(config: Mapping[str, Any], releases: Iterable[str] | None = None) -> str | None:
    """``_ModelRegistry._raise_for_unsupported``: an architecture the registry removed, which stops
    the engine as its config is built (with ``--model-impl vllm``, or where the Transformers backend
    has no such model: ``transformers_refusal`` says the rest). None where a release serves it."""
    found = removed_in(config, releases)
    if found is None:
        return None
    release, arch, last = found
    return (f"vLLM {release} does not serve {arch}: \"{removed_words(arch, last)}\" "
            f"(_ModelRegistry._raise_for_unsupported)")


def transformers_refusal(config: Mapping[str, Any], layer: int, layer_type: str) -> str | None:
    """A removed architecture that ``_try_resolve_transformers`` hands to vLLM's Transformers backend
    under ``--model-impl auto`` (the default) or ``transformers``: the config passes, and building
    the model stops at its first layer that does not dispatch through the Transformers attention
    interface (``_create_attention_instances``), ``layer`` (named ``layer_type`` by transformers'
    config). None where a release serves the architecture."""
    found = removed_in(config)
    if found is None:
        return None
    release, arch, last = found
    return (f"vLLM {release}'s registry removed {arch} (served until v{last}); under --model-impl auto "
            f"(the default) its Transformers backend takes it (_try_resolve_transformers) and stops building "
            f"the model: \"Layer {layer} ({layer_type}) does not dispatch through the Transformers attention "
            f"interface and vLLM has no other way to handle it.\" (_create_attention_instances); with "
            f"--model-impl vllm: \"{removed_words(arch, last)}\" (_ModelRegistry._raise_for_unsupported)")


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


def served_anywhere(archs: Iterable[str]) -> bool:
    """Whether some release's registry serves one of ``archs``."""
    wanted = set(archs)
    return any(wanted.intersection(architectures(release)["served"]) for release in known_releases())
