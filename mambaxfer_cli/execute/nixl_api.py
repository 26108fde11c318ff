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
    """NIXL's ``_api`` module.

    For DRAM the backend wheel is imported directly: the ``nixl`` meta package imports torch
    (about 1.5 s per rank process) only to choose between its cu12 and cu13 wheels when torch
    is a CPU build, and both wheels move DRAM alike. For VRAM torch is imported first, so the
    meta package picks the wheel matching torch's CUDA.
    """
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
