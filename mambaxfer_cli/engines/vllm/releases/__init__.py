"""The vLLM releases mambaxfer knows, oldest first: one folder ``v<major>_<minor>/`` each, found here
(its ``RELEASE`` and ``serve_flags.json``; docs/architecture.md), so adding one is adding a folder."""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import replace
from pathlib import Path

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.release import Release

_FOLDER = re.compile(r"^v(\d+)_(\d+)$")
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.[0-9A-Za-z]+)*(?:[+-].*)?$")


def _found() -> tuple[Release, ...]:
    known = []
    for info in pkgutil.iter_modules(__path__):
        numbers = _FOLDER.match(info.name)
        if not numbers or not info.ispkg:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        name = f"{int(numbers.group(1))}.{int(numbers.group(2))}"
        folder = Path(module.__file__ or "").parent
        known.append(replace(module.RELEASE, name=name, version=f"{name}.0",
                             flag_table=folder / "serve_flags.json"))
    return tuple(sorted(known, key=lambda r: (int(r.name.split(".")[0]), int(r.name.split(".")[1]))))


RELEASES: tuple[Release, ...] = _found()
NEWEST = RELEASES[-1]
NAMES: tuple[str, ...] = tuple(r.name for r in RELEASES)


def minor(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version such as ``0.34``, ``0.34.0``, ``0.34.1.dev3+gabc``; None if it is none."""
    match = _VERSION.match(str(version).strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def release(name: str) -> Release:
    """The release a version names: ``0.33``, ``0.33.0``, ``0.34.x`` (any patch release of it)."""
    found = minor(name)
    for known in RELEASES:
        if found is not None and minor(known.name) == found:
            return known
    raise UserError(f"unknown vLLM release '{name}'; mambaxfer knows {', '.join(NAMES)}")


def block_size_defaults() -> str:
    """Each release's default ``--block-size``, for help: ``16 in vLLM 0.33, 64 in 0.34``."""
    return ", ".join(f"{r.default_block_size} in {'vLLM ' if i == 0 else ''}{r.name}" for i, r in enumerate(RELEASES))


def choices() -> str:
    """The releases, for help: ``0.33 or 0.34``."""
    return " or ".join((", ".join(NAMES[:-1]), NAMES[-1])) if len(NAMES) > 1 else NAMES[0]
