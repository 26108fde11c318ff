"""The one exception family for user errors (the CLI prints its message and exits 2), and how
such a message shows what the user gave."""

from __future__ import annotations


class UserError(Exception):
    """Something the user asked for is wrong; the message says what and how to fix it."""


class EngineRefuses(UserError):
    """The engine would not start what was asked (its own words in the message): one line, like a
    user error, but a verdict, so the CLI exits 1, not 2."""


def clipped(text: str, limit: int = 80) -> str:
    """A long text (a path, a model name) cut to its start, with its length."""
    return text if len(text) <= limit else f"{text[:limit - 3]}... ({len(text)} characters)"


def quoted(value: object, limit: int = 60) -> str:
    """A value quoted as Python writes it (escaped); when long, the start of it and its length."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else f"{value[:40]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:40]}... ({len(text)} characters)"
