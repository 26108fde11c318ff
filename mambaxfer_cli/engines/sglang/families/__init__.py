"""SGLang's rows of the model families: one module per family, named as the core's (``families/``),
giving each release's rows by family label (``SGLANG_0_5_23``: how SGLang 0.5.23 serves it, its
srt/models/ file and whether its config class hands the config to mamba2_state_dtype)."""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FamilyRule:
    """How SGLang serves one model family (keyed by the family label mambaxfer reads)."""

    served: bool                     # mambaxfer answers for it under this release
    config_ssm_dtype: bool = False   # its config hook passes the config to mamba2_state_dtype
    note: str = ""
    conv_shard_groups: bool = True   # its GDN config hook passes conv_shard_groups to Mamba2StateShape.create
    kda_heads: str = ""              # its own KDA mixer's refusal of a TP size ({heads}, {tp}); "": Kimi's
    whole_tp: str = ""               # its mixer's refusal of any attention TP size above 1 ({tp})


def _modules() -> list[Any]:
    return [importlib.import_module(f"{__name__}.{info.name}") for info in pkgutil.iter_modules(__path__)]


def rows(release: str) -> dict[str, FamilyRule]:
    """Every family module's rows for ``release`` (the name its modules give them)."""
    return {label: rule for module in _modules() for label, rule in getattr(module, release, {}).items()}


def merged(name: str) -> dict[str, Any]:
    """Every family module's entries under ``name`` (a mapping each), in one mapping."""
    return {key: value for module in _modules() for key, value in getattr(module, name, {}).items()}


def given(name: str) -> Any:
    """What the one family module that has ``name`` gives under it (conformance's stand-ins)."""
    return next(getattr(module, name) for module in _modules() if hasattr(module, name))
