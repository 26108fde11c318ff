"""How a rank process starts: the coordinator runs ``python -c`` with this module's ``spawn_main``,
in a process group of its own (a terminal's Ctrl-C or hang-up reaches only the coordinator, which
stops every rank), and hands it its task through an unnamed file and its pipe as a descriptor."""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
from multiprocessing.connection import Connection

SPAWN_CODE = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
              "from mambaxfer_cli.execute.rank_process import spawn_main; spawn_main(sys.argv[2:])")


def command(name: str, task_fd: int, conn_fd: int) -> list[str]:
    """The command line of rank ``name``'s process (this interpreter, this process's import path);
    the name comes last, for ``ps``."""
    return [sys.executable, "-c", SPAWN_CODE, json.dumps(sys.path), str(task_fd), str(conn_fd), str(os.getpid()),
            name]


def spawn_main(argv: list[str]) -> None:
    """Entry of a rank process: read the task, then run it."""
    for signum in (signal.SIGINT, signal.SIGHUP):   # the coordinator's to hear, should one come here
        signal.signal(signum, signal.SIG_IGN)
    from mambaxfer_cli.execute.rank import rank_main

    task_fd, conn_fd, coordinator = (int(a) for a in argv[:3])
    with os.fdopen(task_fd, "rb") as handle:
        task, deadline = pickle.load(handle)
    rank_main(task, deadline, Connection(conn_fd), coordinator)
