"""SGLang's rows of the model families: one module per family, named as the core's (``families/``),
each giving its ``FamilyRule`` per release (``SGLANG_0_5_23``) by family label, and its hooks."""

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


def merged(name: str) -> dict[str, Any]:
    """Every family module's entries under ``name`` (a mapping each), in one mapping."""
    return {key: value for module in _modules() for key, value in getattr(module, name, {}).items()}


def given(name: str) -> Any:
    """What the one family module that has ``name`` gives under it (conformance's stand-ins)."""
    return next(getattr(module, name) for module in _modules() if hasattr(module, name))
