"""Which vLLM release answers are for by default: the vLLM installed beside mambaxfer, read from
its package metadata (vLLM itself is never imported: it takes seconds and may need a GPU), else
the newest release mambaxfer knows."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

from mambaxfer_cli.engines.vllm.release import Release
from mambaxfer_cli.engines.vllm.releases import NEWEST, RELEASES, minor


@dataclass(frozen=True)
class DefaultRelease:
    release: Release
    installed: str | None       # the installed vLLM's version, if any
    note: str | None = None     # what to tell the user once (an installed release mambaxfer does not know)


def installed_version() -> str | None:
    """The vLLM version in this environment, from its package metadata (vLLM is not imported)."""
    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None


def default_release(installed: str | None = None, probe: bool = True) -> DefaultRelease:
    """The installed vLLM's release when mambaxfer knows it; a newer one: the newest known; an
    older one: the oldest known (each said in ``note``); none installed: the newest known."""
    version = installed_version() if installed is None and probe else installed
    if version is None:
        return DefaultRelease(NEWEST, None)
    found = minor(version)
    for known in RELEASES:
        if found == minor(known.name):
            return DefaultRelease(known, version)
    newest = minor(NEWEST.name)
    newer = found is None or (newest is not None and found > newest)
    chosen = NEWEST if newer else RELEASES[0]
    return DefaultRelease(chosen, version, (
        f"vLLM {version} is installed, {'newer' if newer else 'older'} than the releases mambaxfer knows "
        f"({', '.join(r.name for r in RELEASES)}): answering for vLLM {chosen.name}; give --vllm-version to choose"))
