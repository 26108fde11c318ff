"""What the coordinator and a rank process tell each other over their pipe, as typed values: Up
(a rank to the coordinator) and Down. Await and Meet are the only two collective steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from mambaxfer_cli.execute.results import RankResult


@dataclass(frozen=True)
class State:
    """What a rank does now: working at ``phase``, or ``waiting`` (for others' progress)."""

    phase: str
    detail: str = ""
    waiting: bool = False


@dataclass(frozen=True)
class Publish:
    key: str
    value: Any


@dataclass(frozen=True)
class Await:
    """Answered with ``Gathered`` once every rank of ``role`` here published ``key``."""

    key: str
    role: str


@dataclass(frozen=True)
class Meet:
    """Answered with ``Released`` once every rank of ``role`` (None: all) met at ``point``."""

    point: str
    role: str | None = None
    milestone: bool = False


@dataclass(frozen=True)
class Done:
    result: RankResult


@dataclass(frozen=True)
class Failed:
    """A failure the rank can explain: a user error (exit 2) or a run that cannot complete (exit 3)."""

    message: str
    user: bool = False


@dataclass(frozen=True)
class Gathered:
    key: str
    values: dict[int, Any]      # rank -> what it published


@dataclass(frozen=True)
class Released:
    point: str


@dataclass(frozen=True)
class Stop:
    """The coordinator ends the run: the rank releases what it holds and exits."""


Up = Union[State, Publish, Await, Meet, Done, Failed]
Down = Union[Gathered, Released, Stop]
