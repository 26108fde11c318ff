"""The vLLM releases mambaxfer knows, oldest first: one module each."""

from __future__ import annotations

import re

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.planning.release import Release
from mambaxfer_cli.planning.releases import v0_33, v0_34

RELEASES: tuple[Release, ...] = (v0_33.RELEASE, v0_34.RELEASE)
NEWEST = RELEASES[-1]
V0_33, V0_34 = RELEASES

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.[0-9A-Za-z]+)*(?:[+-].*)?$")


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
    raise UserError(f"unknown vLLM release '{name}'; mambaxfer knows {', '.join(r.name for r in RELEASES)}")
