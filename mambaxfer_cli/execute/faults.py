"""Faults the tests inject: ``MAMBAXFER_EXECUTE_FAULT=<rank>:<die|hang|work>@<point>`` (``P0:hang@serve``)."""

from __future__ import annotations

import os
import time

from mambaxfer_cli.execute.tasks import RankTask
from mambaxfer_cli.exits import EXIT_INTERNAL

FAULT_ENV = "MAMBAXFER_EXECUTE_FAULT"
WORK_S = 4.0


def fault(task: RankTask, point: str) -> None:
    """Die or hang here when the environment asks it of this rank at this point."""
    spec = os.environ.get(FAULT_ENV, "")
    if not spec.startswith(f"{task.name}:") or not spec.endswith(f"@{point}"):
        return
    action = spec[len(task.name) + 1:-len(point) - 1]
    if action == "die":
        os._exit(EXIT_INTERNAL)   # as a rank with a bug ends
    if action == "hang":
        while True:
            time.sleep(1)
    if action == "work":
        end = time.monotonic() + WORK_S
        while time.monotonic() < end:
            pass
