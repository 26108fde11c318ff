"""The one place that imports NIXL; only rank processes call it."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

INSTALL_HINT = ("install the execute extra: pip install torch first (a CPU build on machines without a "
                "GPU), then pip install -e '.[execute]' (nixl==1.5.1); see the README")


class NixlMissing(Exception):
    """NIXL cannot be imported in this environment."""


def load_nixl(device: str) -> ModuleType:
    """NIXL's ``_api`` module: for DRAM a backend wheel directly (the meta package would import
    torch, 1.5 s per rank, only to pick one); for VRAM the meta package, after torch."""
    try:
        if device == "cuda":
            import torch  # noqa: F401  (tells the meta package which CUDA to load)

            return importlib.import_module("nixl._api")
        if importlib.util.find_spec("nixl") is None:
            raise ModuleNotFoundError("No module named 'nixl'", name="nixl")
        for wheel in ("nixl_cu13", "nixl_cu12"):  # the meta package's own order without CUDA
            try:
                return importlib.import_module(f"{wheel}._api")
            except ModuleNotFoundError as exc:
                if exc.name != wheel:
                    raise
        return importlib.import_module("nixl._api")
    except ImportError as exc:
        raise NixlMissing(f"NIXL cannot be imported ({exc}); {INSTALL_HINT}") from None
