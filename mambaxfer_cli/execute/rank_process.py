"""How a rank process starts and ends: the coordinator runs ``spawn_main`` in a process of its own
(``coordinator.command``), and hands it its task through an unnamed file and its pipe as a
descriptor. The rank runs its program (execute's or bench's, P's or D's, vLLM's or SGLang's) and says how it ended."""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Callable

from mambaxfer_cli.bench import rank as bench_rank
from mambaxfer_cli.engines.sglang.transfer import bench_rank as sglang_bench_rank
from mambaxfer_cli.engines.sglang.transfer.bench import SlotBenchDecode, SlotBenchPrefill
from mambaxfer_cli.execute import rank
from mambaxfer_cli.engines.sglang.transfer import rank as sglang_rank
from mambaxfer_cli.engines.sglang.transfer import remote as sglang_remote
from mambaxfer_cli.execute.channel import Channel, PeerGone, RankFailure, StopRequested
from mambaxfer_cli.execute.messages import Done, Failed
from mambaxfer_cli.execute.results import RankResult
from mambaxfer_cli.engines.sglang.transfer.run import SlotTask
from mambaxfer_cli.execute.tasks import RankTask
from mambaxfer_cli.exits import EXIT_RANK_ORPHANED

WATCH_EVERY = 0.25      # how often a rank looks whether its coordinator is still there

# (role, a bench run) -> the program of the rank
PROGRAMS: dict[tuple[str, bool], Callable[..., RankResult]] = {
    ("P", False): rank.prefill, ("D", False): rank.decode,
    ("P", True): bench_rank.bench_prefill, ("D", True): bench_rank.bench_decode,
}


def _watch(coordinator: int) -> None:
    """End this rank when its coordinator is gone (even before the rank got here): no orphan."""

    def watch() -> None:
        while os.getppid() == coordinator:
            time.sleep(WATCH_EVERY)
        os._exit(EXIT_RANK_ORPHANED)

    threading.Thread(target=watch, daemon=True).start()


def spawn_main(argv: list[str]) -> None:
    """Entry of a rank process."""
    for signum in (signal.SIGINT, signal.SIGHUP):   # the coordinator's to hear, should one come here
        signal.signal(signum, signal.SIG_IGN)
    task_fd, conn_fd, coordinator = (int(a) for a in argv[:3])
    _watch(coordinator)
    with os.fdopen(task_fd, "rb") as handle:
        task: RankTask = pickle.load(handle)
    conn = Connection(conn_fd)
    ch = Channel(conn)
    try:
        if isinstance(task, (SlotBenchPrefill, SlotBenchDecode)):
            program = sglang_bench_rank.PROGRAMS[task.role]
        elif isinstance(task, SlotTask):
            program = (sglang_remote if task.settings.discovery else sglang_rank).PROGRAMS[task.role]
        else:
            program = PROGRAMS[task.role, task.settings.bench is not None]
        ch.send(Done(program(task, ch)))
    except StopRequested:
        pass
    except PeerGone as exc:
        ch.send(Failed(f"{task.name}: {exc} (while {ch.phase_name})"))
    except RankFailure as exc:
        ch.send(Failed(f"{task.name}: {exc}", exc.user))
    except Exception as exc:  # NIXL raises its own types (nixlRemoteDisconnectError, ...)
        traceback.print_exc()    # into the rank's own output, which a failed run's log keeps
        ch.send(Failed(f"{task.name}: {type(exc).__name__}: {exc} (while {ch.phase_name})"))
    finally:
        conn.close()
