"""How a command tells its outcome: one red line for a user error, and the exit code to keep
when its reader stops reading early (``mambaxfer check ... | head -1``)."""

from __future__ import annotations

import os
import re
import signal
import sys
from contextlib import contextmanager
from typing import Iterator


_kept: list[int] = []
_ERROR_AND_FIRST_WORD = re.compile(r"^error: \S+")   # never 'error:' alone on its line


def _unwrapped() -> bool:
    """Whether stderr's messages stay one line each: stderr is a pipe or a file (a log that grep
    reads whole) and no width was asked for with ``COLUMNS``."""
    try:
        at_terminal = sys.stderr.isatty()
    except (AttributeError, ValueError):    # closed or replaced
        at_terminal = False
    return not at_terminal and not os.environ.get("COLUMNS")


def red_line(message: str) -> None:
    """One red message on stderr, wrapped between words (never inside a word or a value) at the
    terminal's width, else ``COLUMNS``; not at a terminal and without ``COLUMNS``, one line."""
    from rich.console import Console
    from rich.text import Text

    from mambaxfer_cli.render.console import Prose

    text = Text.assemble(("error:", "bold red"), " ", message)
    if _unwrapped():
        Console(stderr=True, highlight=False, soft_wrap=True).print(text)
    else:
        Console(stderr=True, highlight=False).print(Prose(text, keep=_ERROR_AND_FIRST_WORD))


@contextmanager
def one_line_when_the_run_fails() -> Iterator[None]:
    """A run that fails (``RunFailure``) as one red line and exit 3; put it outside a transient live
    view, which would clear a line written while it shows."""
    import typer

    from mambaxfer_cli.execute.coordinator import RunFailure
    from mambaxfer_cli.exits import EXIT_RUN_FAILED

    try:
        yield
    except RunFailure as exc:
        red_line(str(exc))
        raise typer.Exit(EXIT_RUN_FAILED) from None


def said(message: str) -> None:
    """A plain line on stderr (a warning, a note), wrapped at the terminal's width as ``red_line``
    is (one line where it is), no markup."""
    from rich.console import Console

    Console(stderr=True, highlight=False, soft_wrap=_unwrapped()).print(message, markup=False)


def keep_exit_code(code: int) -> None:
    """The command's outcome is known: the exit code to keep if its output pipe closes early."""
    _kept[:] = [code]


def forget() -> None:
    """A new command line starts: no outcome is known yet."""
    _kept.clear()


def closed_pipe() -> int:
    """A reader that stopped reading (``| head``) is not a failure: the command's own verdict, when
    it is known, else 141 as for SIGPIPE."""
    try:        # the interpreter's last flush must not complain
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return _kept[0] if _kept else 128 + signal.SIGPIPE
