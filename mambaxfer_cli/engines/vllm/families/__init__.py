"""vLLM's special treatment of some model families: one module per family, named as the core's, and its
parts beside it (``<name>_proof``); generic code asks ``first(hook, ...)`` instead of naming a family."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from typing import Any

from mambaxfer_cli import families


@cache
def _modules(part: str) -> tuple[Any, ...]:
    names = {info.name + part for info in pkgutil.iter_modules(families.__path__)}
    return tuple(importlib.import_module(f"{__name__}.{info.name}")
                 for info in pkgutil.iter_modules(__path__) if info.name in names)


def first(hook: str, *args: Any, part: str = "") -> Any:
    """The first answer other than None of a family module's function ``hook`` (None: no family's);
    ``part``: of its ``<name><part>`` modules."""
    for module in _modules(part):
        answer = getattr(module, hook, lambda *_: None)(*args)
        if answer is not None:
            return answer
    return None


def gathered(name: str) -> tuple[Any, ...]:
    """Every family module's ``name`` (a constant), of those that hold one."""
    return tuple(getattr(module, name) for module in _modules("") if hasattr(module, name))
