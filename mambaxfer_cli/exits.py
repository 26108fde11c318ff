"""How a mambaxfer command ends: its exit codes, and the signals that stop it (installed before
anything else is imported, hence no heavy import here). The first signal decides; a later one
changes nothing.
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import sys
from types import FrameType
from typing import Iterator

EXIT_OK = 0
EXIT_WRONG = 1          # wrong bytes (check, execute, bench), or a pairing vLLM refuses (check, preflight)
EXIT_USAGE = 2          # a user error: one red line
EXIT_RUN_FAILED = 3     # an execute or bench run that could not complete
EXIT_INTERNAL = 70      # sysexits' EX_SOFTWARE, distinct from every verdict: a bug, the traceback is printed
EXIT_INTERRUPTED = 128 + signal.SIGINT     # 130, as a shell reports a process Ctrl-C ended
# A rank process's own end, which its coordinator reports (the command then ends with EXIT_RUN_FAILED):
EXIT_RANK_ORPHANED = 75  # its coordinator is gone (sysexits' EX_TEMPFAIL)

# The signals that stop a command, and the line each ends with (exit code 128 + the signal).
STOP_LINES = {signal.SIGINT: "interrupted", signal.SIGTERM: "stopped by SIGTERM",
              signal.SIGHUP: "stopped by SIGHUP"}


class Stopped(KeyboardInterrupt):
    """A signal that ends the command: unwinds like Ctrl-C, so that every ``finally`` runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.exit_code = 128 + signum
        self.line = STOP_LINES.get(signal.Signals(signum), f"stopped by signal {signum}")


class _State:
    first: int | None = None    # the signal that stops this command
    raised = False              # whether Stopped was raised for it yet
    holding = 0                 # depth of held() sections


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if _State.first is None:
        _State.first = signum
    elif _State.raised or signum != _State.first:
        return          # a later signal is not news
    if not _State.holding:
        _State.raised = True
        raise Stopped(_State.first)


def _unraisable(info: sys.UnraisableHookArgs) -> None:
    """A Stopped raised where it cannot propagate (a ``__del__``, a weakref callback: 'Exception
    ignored') is delivered again from a thread of its own, landing after this hook."""
    if isinstance(info.exc_value, Stopped) and _State.first is not None and _State.first > 0:
        _State.raised = False
        _thread.start_new_thread(_thread.interrupt_main, (signal.Signals(_State.first),))
        return
    sys.__unraisablehook__(info)


def install() -> None:
    """Handle the stop signals; one the command was started with ignored stays so (``nohup``)."""
    sys.unraisablehook = _unraisable
    for signum in STOP_LINES:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, _on_signal)


def quiet() -> None:
    """The command has ended: a signal from now on changes nothing, even while the interpreter exits."""
    _State.first = _State.first or -1
    _State.raised = True
    for signum in STOP_LINES:
        signal.signal(signum, signal.SIG_IGN)


@contextlib.contextmanager
def held() -> Iterator[None]:
    """A section a stop signal must not cut in two: a signal meanwhile is raised as it ends."""
    _State.holding += 1
    try:
        yield
    finally:
        _State.holding -= 1
        if not _State.holding and _State.first is not None and _State.first > 0 and not _State.raised:
            _State.raised = True
            raise Stopped(_State.first)


def report(stop: KeyboardInterrupt) -> int:
    """The one line of a stopped command on stderr; its exit code."""
    if not isinstance(stop, Stopped):       # Python's own Ctrl-C (before install, or a host that never ran it)
        stop = Stopped(signal.SIGINT)
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(stop.line + "\n")
        sys.stderr.flush()
    return stop.exit_code
