"""A rank process's entry (``spawn_main``): it runs the program its task names and says how it ended."""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Callable

from mambaxfer_cli.execute.channel import Channel, PeerGone, RankFailure, StopRequested
from mambaxfer_cli.execute.messages import Done, Failed
from mambaxfer_cli.execute.results import RankResult
from mambaxfer_cli.execute.tasks import RankTask
from mambaxfer_cli.exits import EXIT_RANK_ORPHANED

WATCH_EVERY = 0.25      # how often a rank looks whether its coordinator is still there

def _watch(coordinator: int) -> None:
    """End this rank when its coordinator is gone (even before the rank got here): no orphan."""
    while os.getppid() == coordinator:
        time.sleep(WATCH_EVERY)
    os._exit(EXIT_RANK_ORPHANED)


def spawn_main(argv: list[str]) -> None:
    """Entry of a rank process."""
    for signum in (signal.SIGINT, signal.SIGHUP):   # the coordinator's to hear, should one come here
        signal.signal(signum, signal.SIG_IGN)
    task_fd, conn_fd, coordinator = (int(a) for a in argv[:3])
    threading.Thread(target=_watch, args=(coordinator,), daemon=True).start()
    with os.fdopen(task_fd, "rb") as handle:
        task: RankTask = pickle.load(handle)
    conn = Connection(conn_fd)
    ch = Channel(conn)
    try:
        module, _, function = task.program.partition(":")
        program: Callable[[RankTask, Channel], RankResult] = getattr(importlib.import_module(module), function)
        ch.send(Done(program(task, ch)))
    except StopRequested:
        pass
    except PeerGone as exc:     # the side that went away first, NIXL's words after
        ch.send(Failed(f"{task.name}: {exc} (while {ch.phase_name})" + (f"; NIXL: {exc.nixl}" if exc.nixl else "")))
    except RankFailure as exc:
        ch.send(Failed(f"{task.name}: {exc}", exc.user))
    except Exception as exc:  # NIXL raises its own types (nixlRemoteDisconnectError, ...)
        traceback.print_exc()    # into the rank's own output, which a failed run's log keeps
        ch.send(Failed(f"{task.name}: {type(exc).__name__}: {exc} (while {ch.phase_name})"))
    finally:
        conn.close()
