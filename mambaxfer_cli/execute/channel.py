"""A rank's end of its pipe to the coordinator, and the ways a rank ends early. A rank keeps no
clock: it says what it does or waits for, and the coordinator decides when nothing progresses.
"""

from __future__ import annotations

import os
import time
from multiprocessing.connection import Connection
from typing import Any, Callable

from mambaxfer_cli.exits import EXIT_RANK_ORPHANED
from mambaxfer_cli.execute.messages import (
    Await, Down, Gathered, Meet, Publish, Released, State, Stop, Up,
)

TICK = 0.2          # at most this often a working rank says how far it got
WAIT_ROUND = 0.002  # between two rounds of a waiting rank's work (notifications, side-channel requests)

Idle = Callable[[], None]


class RankFailure(Exception):
    """A failure this rank can explain: a user error (exit 2) or a run that cannot complete (exit 3)."""

    def __init__(self, message: str, user: bool = False) -> None:
        super().__init__(message)
        self.user = user


class PeerGone(RankFailure):
    """The other side's agent is unreachable; ``nixl``: NIXL's own error, where it said one."""

    def __init__(self, message: str, nixl: str = "") -> None:
        super().__init__(message)
        self.nixl = nixl


class StopRequested(Exception):
    """The coordinator asked this rank to stop."""


class Channel:
    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._state = State("starting")
        self._ticked = 0.0
        self._inbox: list[Down] = []

    @property
    def phase_name(self) -> str:
        return self._state.phase

    def send(self, message: Up) -> None:
        try:
            self._conn.send(message)
        except OSError:
            os._exit(EXIT_RANK_ORPHANED)   # nobody to report to

    def _report(self, state: State) -> None:
        if state != self._state:
            self._state = state
            self.send(state)

    def phase(self, name: str, detail: str = "") -> None:
        """This rank works at ``name``."""
        self._report(State(name, detail))

    def progress(self, detail: str) -> None:
        """How far this phase's work got (said at most every TICK seconds)."""
        if time.monotonic() - self._ticked >= TICK:
            self._ticked = time.monotonic()
            self._report(State(self._state.phase, detail))

    def waiting(self, what: str) -> None:
        """This rank waits for ``what``: others' progress, not its own."""
        self._report(State(self._state.phase, f"waiting for {what}", waiting=True))

    def publish(self, key: str, value: Any) -> None:
        self.send(Publish(key, value))

    def gather(self, key: str, role: str, what: str, idle: Idle | None = None, every: float = 0.5) -> dict[int, Any]:
        """What every rank of ``role`` published under ``key``, once they all did."""
        self.send(Await(key, role))
        got = self._wait(lambda m: isinstance(m, Gathered) and m.key == key, what, idle, every)
        assert isinstance(got, Gathered)
        return got.values

    def meet(self, point: str, role: str | None = None, what: str | None = None, milestone: bool = False,
             idle: Idle | None = None, every: float = 0.5) -> None:
        """Wait until every rank of ``role`` (None: all of them) is at ``point``."""
        self.send(Meet(point, role, milestone))
        self._wait(lambda m: isinstance(m, Released) and m.point == point,
                   what or f"every rank at '{point}'", idle, every)

    def _wait(self, wanted: Callable[[Down], bool], what: str, idle: Idle | None, every: float) -> Down:
        """As long as it takes; ``idle()`` meanwhile, every ``every`` seconds at most."""
        self.waiting(what)
        while True:
            found = next((m for m in self._inbox if wanted(m)), None)
            if found is not None:
                self._inbox.remove(found)
                self._report(State(self._state.phase))    # working again
                return found
            if not self._receive(every) and idle is not None:
                idle()

    def _receive(self, wait: float) -> bool:
        """Take one message from the coordinator into the inbox (a stop is raised)."""
        if not self._conn.poll(wait):
            return False
        try:
            message = self._conn.recv()
        except (EOFError, OSError):
            os._exit(EXIT_RANK_ORPHANED)
        if isinstance(message, Stop):
            raise StopRequested()
        self._inbox.append(message)
        return True

    def check_stop(self) -> None:
        """Raise StopRequested when the coordinator asked this rank to stop."""
        while self._receive(0):
            pass
