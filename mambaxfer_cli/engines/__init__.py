"""The serving engines mambaxfer knows: one package each under ``engines/``, found by name.

An engine's package fills one ``ServingEngine`` (its ``ENGINE``): the rules of the engine that
run P and D, behind the few questions the commands ask of it. Everything else of the engine (its
releases, geometry, handshake verdict, reads and descriptor IDs, command-line reader, conformance
probe) stays inside its package; the core (``planning/``, ``readers/``) imports none of it.
Adding an engine is adding a package here with an ``ENGINE``; ``--engine`` lists it.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from typing import Any, Protocol

from mambaxfer_cli.errors import UserError

DEFAULT = "vllm"


class ServingEngine(Protocol):
    """What the commands ask of a serving engine."""

    @property
    def name(self) -> str:
        """What ``--engine`` takes: ``vllm``."""
        ...

    @property
    def title(self) -> str:
        """How answers name it: ``vLLM``."""
        ...

    @property
    def unanswered(self) -> str | None:
        """Why the commands do not answer for this engine yet (None: they do)."""
        ...

    def release_names(self) -> tuple[str, ...]:
        """The releases mambaxfer has rules for, oldest first."""
        ...

    def release(self, name: str | None) -> Any:
        """The release a version names; None: the one installed here, else the newest known."""
        ...

    def read_serve_line(self, text: str, origin: str = "") -> Any:
        """One engine's command line (or a script that runs one), as the engine reads it."""
        ...


def described() -> str:
    """For help: each engine with the releases it has rules for, ``vllm (vLLM 0.33, 0.34)``."""
    return ", ".join(f"{e.name} ({e.title} {', '.join(e.release_names())})" for e in map(engine, names()))


def names() -> tuple[str, ...]:
    """The engines' names, from their packages (none is imported)."""
    return tuple(sorted(info.name for info in pkgutil.iter_modules(__path__) if info.ispkg))


@lru_cache(maxsize=None)
def engine(name: str = DEFAULT) -> ServingEngine:
    """The engine ``--engine`` names."""
    if name not in names():
        raise UserError(f"--engine: unknown serving engine '{name}'; mambaxfer knows {', '.join(names())}")
    found: ServingEngine = importlib.import_module(f"{__name__}.{name}").ENGINE
    return found
