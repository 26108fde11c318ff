"""The one exception family for user errors (exit 2; a refusal, exit 1), and how they quote input."""

from __future__ import annotations


class UserError(Exception):
    """Something the user asked for is wrong; the message says what and how to fix it."""


class Refused(UserError):
    """The engine would not run what was asked: a verdict (exit 1), not a misread input (exit 2)."""


def reworded(exc: UserError, message: str) -> UserError:
    """``exc`` said anew (with where it came from), of the same kind: a refusal stays one."""
    return type(exc)(message)


def clipped(text: str, limit: int = 80) -> str:
    """A long text (a path, a model name) cut to its start, with its length."""
    return text if len(text) <= limit else f"{text[:limit - 3]}... ({len(text)} characters)"


def quoted(value: object, limit: int = 60) -> str:
    """A value quoted as Python writes it (escaped); when long, the start of it and its length."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else f"{value[:40]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:40]}... ({len(text)} characters)"
