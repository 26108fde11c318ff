"""What preflight shares between the engines: the two sides, the fields compared, a flag change,
a fix and the report that holds them, and command lines quoted for a shell."""

from __future__ import annotations

import difflib
import shlex
from dataclasses import dataclass
from typing import Any, Generic, Iterable, Protocol, Sequence, TypeVar

from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG

SCHEMA = "mambaxfer.preflight/v1"
PREFILL, DECODE = "prefill", "decode"
SIDE_NAME = {PREFILL: "P", DECODE: "D"}


@dataclass(frozen=True)
class Field:
    name: str
    prefill: object
    decode: object
    compared: bool            # by the engine (its compatibility checks)
    ok: bool | None = None    # the rule when it is not equality (TP sizes, kernel blocks)

    @property
    def agree(self) -> bool:
        return self.prefill == self.decode if self.ok is None else self.ok

    def to_dict(self) -> dict:
        return {"field": self.name, "prefill": self.prefill, "decode": self.decode, "agree": self.agree}


@dataclass(frozen=True)
class Change:
    side: str
    flag: str                 # a flag, or VAR= for the environment
    old: str | None           # as it was (None: absent)
    new: str | None           # as it becomes (None: removed; "": a flag without a value)
    why: str
    rename: bool = False      # an unknown flag (``flag``) spelled as ``new``

    def describe(self) -> str:
        name = SIDE_NAME[self.side]
        if self.flag.endswith("="):
            return f"{name}: export {self.flag}{self.new}  ({self.why})"
        if self.rename:
            return f"{name}: {self.new} for {self.flag}  ({self.why})"
        if self.new == "":
            return f"{name}: {self.flag}  ({self.why})"
        if self.new is None:
            return f"{name}: remove {self.flag}  ({self.why})"
        return f"{name}: {self.flag} {self.new}  ({self.why})"

    def to_dict(self) -> dict:
        return {"side": self.side, "flag": self.flag.rstrip("="), "old": self.old, "new": self.new, "why": self.why}


class Quotable(Protocol):
    """A command line: its environment prefixes and its words."""

    @property
    def words(self) -> Sequence[str]: ...

    def environment(self) -> Sequence[tuple[str, str]]: ...


class CommandLine(Quotable, Protocol):
    def command(self) -> str: ...


class Assessed(Protocol):
    """An engine's verdict on a pairing."""

    @property
    def outcome(self) -> str: ...

    @property
    def works(self) -> bool: ...


L = TypeVar("L", bound=CommandLine)
A = TypeVar("A", bound=Assessed)


@dataclass(frozen=True)
class Fix(Generic[L, A]):
    changes: tuple[Change, ...]
    prefill: L
    decode: L
    after: A

    def to_dict(self) -> dict:
        return {"changes": [c.to_dict() for c in self.changes], "prefill": self.prefill.command(),
                "decode": self.decode.command(), "verdict_after": self.after.outcome}


@dataclass(frozen=True)
class Report(Generic[L, A]):
    """A preflight's verdict, its fix and its warnings; each engine's says its headline and document."""

    assessment: A
    fix: Fix[L, A] | None
    warnings: tuple[str, ...]

    @property
    def verdict(self) -> str:
        return self.assessment.outcome

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.assessment.works else EXIT_WRONG

    def headline(self) -> str:
        raise NotImplementedError

    def fix_commands(self) -> list[str]:
        """The fix's changes and corrected lines, as a JUnit failure lists them after the refusals."""
        if self.fix is None:
            return []
        return (["fix:"] + [c.describe() for c in self.fix.changes]
                + [self.fix.prefill.command(), self.fix.decode.command()])


def quote_lines(line: Quotable, width: int = 78) -> list[str]:
    """A corrected command as shell lines of at most ``width`` columns (``\\`` continuations),
    never cutting a word."""
    quoted = [f"{k}={shlex.quote(v)}" for k, v in line.environment()] + [shlex.quote(w) for w in line.words]
    words: list[str] = []
    for w in quoted:   # a flag and its value stay on one line
        if words and words[-1].startswith("-") and " " not in words[-1] and not w.startswith("-") \
                and len(words[-1]) + 1 + len(w) + 4 <= width:
            words[-1] += " " + w
        else:
            words.append(w)
    lines, current = [], ""
    for w in words:
        if current and len(current) + 1 + len(w) + 2 > width:
            lines.append(current + " \\")
            current = "  " + w
        else:
            current = f"{current} {w}" if current else w
    lines.append(current)
    return lines


def set_words(words: Sequence[str], occurrences: Iterable[Any], new: list[str]) -> list[str]:
    """``words`` with every occurrence of a flag (``start``, ``end``) replaced by ``new``, at the first."""
    out = list(words)
    occ = sorted(occurrences, key=lambda o: o.start)
    if not occ:
        return out + new
    first = occ[0].start
    for o in reversed(occ):
        del out[o.start:o.end]
    return out[:first] + new + out[first:]


def with_env(env: Iterable[tuple[str, str]], change: Change) -> tuple[tuple[str, str], ...]:
    """The environment prefix with an environment change (``VAR=``) applied."""
    assert change.new is not None, "an environment change sets a value"
    return tuple((k, v) for k, v in env if k != change.flag[:-1]) + ((change.flag[:-1], change.new),)


def did_you_mean(name: str, spellings: Iterable[str]) -> str:
    """argparse's suggestion for an unknown option (Python 3.12+: close matches of the option
    strings), as "did you mean --x?"; empty where nothing is close."""
    close = difflib.get_close_matches(name, sorted(spellings), n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else ""


def unrecognized(flags: Iterable[str], spellings: Iterable[str]) -> str:
    """What a server's argparse parser says of options it does not know (its error, exit 2), with
    a suggestion for the first where one is close."""
    flags = list(flags)
    hint = did_you_mean(flags[0], spellings) if flags else ""
    return f"unrecognized arguments: {' '.join(flags)}" + (f" ({hint})" if hint else "")
