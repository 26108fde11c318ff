"""What preflight shares between the engines: fields compared, flag changes, the fix, the report,
the option a person meant, the nearest TP sizes, and command lines quoted for a shell."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from itertools import product
from typing import Any, Callable, Generic, Iterable, Mapping, Protocol, Sequence, TypeVar

from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.readers.shell import OPTIONAL, SETS, UNKNOWN, Option, ServerLine

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


SHOWN = 40       # the longest value a change's line names (a longer one is in the corrected line)


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
            value = "" if not self.old else " and its value" if len(self.old) > SHOWN else f" {self.old}"
            return f"{name}: remove {self.flag}{value}  ({self.why})"
        if len(self.new) > SHOWN:    # a JSON value: whole in the corrected line, never cut here
            return f"{name}: {self.flag} as the corrected line has it  ({self.why})"
        return f"{name}: {self.flag} {self.new}  ({self.why})"

    def to_dict(self) -> dict:
        return {"side": self.side, "flag": self.flag.rstrip("="), "old": self.old, "new": self.new, "why": self.why}


class Assessed(Protocol):
    """An engine's verdict on a pairing."""

    @property
    def outcome(self) -> str: ...

    @property
    def works(self) -> bool: ...

    @property
    def fields(self) -> list[Field]: ...


L = TypeVar("L", bound=ServerLine)
A = TypeVar("A", bound=Assessed)


@dataclass(frozen=True)
class Fix(Generic[L, A]):
    changes: tuple[Change, ...]
    prefill: L
    decode: L
    after: A

    @property
    def changed(self) -> tuple[str, ...]:
        """The sides whose lines the changes touch: the lines to paste."""
        return tuple(side for side in (PREFILL, DECODE) if any(c.side == side for c in self.changes))

    def line(self, side: str) -> L:
        return self.prefill if side == PREFILL else self.decode

    def to_dict(self) -> dict:
        return {"changes": [c.to_dict() for c in self.changes], "prefill": self.prefill.command(),
                "decode": self.decode.command(), "changed": list(self.changed), "verdict_after": self.after.outcome}


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

    def document(self, head: dict, prefill: dict, decode: dict, own: dict) -> dict:
        """The document: ``head`` (the engine, its releases, the verdict), the engines, the fields
        compared and not, ``own`` (the engine's verdict), the fix and the warnings."""
        fields = self.assessment.fields
        return {"schema": SCHEMA, **head, "exit_code": self.exit_code, "headline": self.headline(),
                "engines": {PREFILL: prefill, DECODE: decode}, "compared": [f.to_dict() for f in fields if f.compared],
                "not_compared": [f.to_dict() for f in fields if not f.compared], **own,
                "fix": self.fix.to_dict() if self.fix else None, "warnings": list(self.warnings)}

    def fix_commands(self) -> list[str]:
        """The fix's changes and corrected lines, as a JUnit failure lists them after the refusals."""
        if self.fix is None:
            return []
        return (["fix:"] + [c.describe() for c in self.fix.changes]
                + [self.fix.line(side).command() for side in self.fix.changed])


def tried(lines: tuple[L, L], apply: Callable[[L, Change], L], build: Callable[[str, L], Any],
          assess: Callable[[Any, Any], A], start: Callable[[bool], list[Change]],
          moves: Callable[[A], list[list[Change]]],
          finish: Callable[[list[Change], A, Any], Fix[Any, A] | None]) -> Fix[Any, A] | None:
    """The first fix that works, tried as a person would: ``start(respell)``'s changes (unknown flags respelled,
    else dropped), then each TP move of ``moves``, finished by ``finish``, on ``lines`` (P's, D's) ``apply``'d."""
    def run(changes: list[Change]) -> tuple[L, L, A]:
        now = dict(zip((PREFILL, DECODE), lines))
        for c in changes:
            now[c.side] = apply(now[c.side], c)
        return now[PREFILL], now[DECODE], assess(build(PREFILL, now[PREFILL]), build(DECODE, now[DECODE]))

    started = start(True)
    try:
        _, _, now = run(started)
    except UserError:      # a respelled flag's value its parser refuses: drop the flag instead
        started = start(False)
        try:
            _, _, now = run(started)
        except UserError:
            return None
    for moved in moves(now):
        try:
            _, _, after = run(started + moved)
        except UserError:
            continue
        found = finish(started + moved, after, run)
        if found is not None:
            return found
    return None


def tp_moves(side: str, flag: str, tp: int, sizes: Sequence[int], what: str) -> list[Change]:
    """A TP size the engine does not start moved to the three nearest ``sizes`` (of two, the smaller)."""
    out = []
    for new in sorted(sizes, key=lambda t: (abs(t - tp), t))[:3]:
        where = "below" if new < tp else "above"
        tie = f"; {2 * tp - new}, as near, takes more GPUs" if new < tp and 2 * tp - new in sizes else ""
        out.append(Change(side, flag, str(tp), str(new), f"{what}; {new} is the nearest size {where} that "
                                                          f"starts and works{tie}"))
    return out


def nearest_first(options: Sequence[Sequence[Change]]) -> list[list[Change]]:
    """One TP move per side (or none), the smallest moves in all first."""
    per_side: list[Sequence[Change | None]] = [list(o) or [None] for o in options]
    moves = sorted(product(*per_side), key=lambda m: sum(abs(int(c.new or 0) - int(c.old or 0)) for c in m if c))
    return [[c for c in m if c] for m in moves]


def merged(changes: Sequence[Change], option: Callable[[str], Any], parser: str) -> list[Change]:
    """``changes`` with a respelling that a later change of the same option replaces said by that one
    (``option``: a flag's option in its parser, with its ``dest``; None where it has none)."""
    renames = [c for c in changes if c.rename and c.new is not None]

    def replaced(c: Change) -> Change | None:
        mine = option(c.flag)
        return next((r for r in renames if r.side == c.side and mine is not None
                     and getattr(option(r.new or ""), "dest", None) == mine.dest), None)

    out = []
    for c in changes:
        if c in renames and any(not x.rename and replaced(x) is c for x in changes):
            continue
        r = None if c.rename else replaced(c)
        out.append(c if r is None else replace(c, why=f"in place of {r.flag}, which {parser} does not take; {c.why}"))
    return out


def quote_lines(line: ServerLine, width: int = 78) -> list[str]:
    """A corrected command as shell lines of at most ``width`` columns, never cutting a word."""
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


def respelled(words: Sequence[str], occurrences: Iterable[Any], new: str | None) -> list[str]:
    """``words`` with each occurrence of an unknown flag spelled ``new``, or removed (None)."""
    out = list(words)
    for o in sorted(occurrences, key=lambda o: o.start, reverse=True):
        if new is None:
            del out[o.start:o.end]
        else:
            _, eq, value = out[o.start].partition("=")
            out[o.start] = new + eq + value
    return out


def taken_value(words: Sequence[str], occurrence: Any) -> str | None:
    """The value a flag's occurrence took (``--flag=value`` or the next word), None where none."""
    first, eq, value = words[occurrence.start].partition("=")
    if eq and first.startswith("--"):
        return value
    return words[occurrence.start + 1] if occurrence.end > occurrence.start + 1 else None


def applied(line: Any, c: Change, reparse: Callable[[Any, list[str], Any, str], L], keys: Mapping[str, str]) -> L:
    """``line`` with ``c`` made and ``reparse``d: its environment prefix set, a flag its parser does
    not take respelled or dropped, or the flag of the field ``keys[c.flag]`` set or removed."""
    words, env = list(line.words), line.env_prefix
    if c.flag.endswith("="):        # an environment change sets a value
        env = tuple((k, v) for k, v in env if k != c.flag[:-1]) + ((c.flag[:-1], str(c.new)),)
    elif c.rename or UNKNOWN + c.flag in line.occurrences and c.flag not in keys:
        words = respelled(words, line.occurrences.get(UNKNOWN + c.flag, ()), c.new)
    else:
        new = [] if c.new is None else [c.flag] if c.new == "" else [c.flag, c.new]     # "": a flag without a value
        occurrences = sorted(line.occurrences.get(keys[c.flag], ()), key=lambda o: o.start)
        first = occurrences[0].start if occurrences else len(words)    # every occurrence replaced at the first
        for o in reversed(occurrences):
            del words[o.start:o.end]
        words[first:first] = new
    return reparse(line, words, env, f"--{c.side}")


def respelling(side: str, flag: str, value: str | None, table: Mapping[str, Option], parser: str) -> Change | None:
    """``flag``, which ``parser`` does not take, spelled as the option of ``table`` a person meant
    (``meant``) where that takes a value as ``flag`` did; None where none fits."""
    hint = meant(flag, table)
    if hint is None or table[hint].takes != OPTIONAL and (value is None) != (table[hint].takes in SETS):
        return None
    return Change(side, flag, flag, hint, f"the flag {parser} knows", rename=True)


def meant(name: str, spellings: Iterable[str]) -> str | None:
    """The one option a person meant by an unknown ``name``: the same name with other dashes, with or
    without ``-size``, the long option it abbreviates, or one typo away; None otherwise."""
    def bare(s: str) -> str:
        return s.lstrip("-").replace("_", "-")

    table = sorted(spellings)
    n = bare(name)
    for fits in (lambda s: bare(s) == n,
                 lambda s: n == bare(s) + "-size" or bare(s) == n + "-size",
                 lambda s: s.startswith("--" + n),
                 lambda s: len(n) >= 4 and _one_edit(bare(s), n)):
        found = [s for s in table if fits(s)]
        if found:
            return found[0] if len(found) == 1 else None
    return None


def _one_edit(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by one letter added, dropped, changed, or two adjacent swapped."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    if len(a) != len(b):
        return a[i + 1:] == b[i:] if len(a) > len(b) else a[i:] == b[i + 1:]
    return a[i + 1:] == b[i + 1:] or (a[i + 2:] == b[i + 2:] and a[i:i + 2] == b[i:i + 2][::-1])


def unrecognized(flags: Iterable[str], spellings: Iterable[str]) -> str:
    """What a server's argparse parser says of options it does not know, with the one ``meant``."""
    flags = list(flags)
    hint = meant(flags[0], spellings) if flags else None
    return f"unrecognized arguments: {' '.join(flags)}" + (f" (did you mean {hint}?)" if hint else "")
