"""Spawn one process per rank, walk them through their program (``messages``), collect what they
measured; on any failure stop every rank. The run fails when nothing progressed for ``timeout``
seconds: progress is a rank reaching a new state, or a working rank using the CPU, so a slow
machine is no fault. Ranks have a process group of their own (Ctrl-C reaches the coordinator
alone) and their output comes to it, kept in a log when the run fails.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Mapping, Sequence

from mambaxfer_cli import exits
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.execute.messages import (
    Await, Done, Down, Failed, Gathered, Meet, Publish, Released, State, Stop, Up,
)
from mambaxfer_cli.execute.results import RankResult
from mambaxfer_cli.execute.tasks import RankTask

SETTLE = 0.3         # after a failure: its root cause (often a dead peer) surfaces within this quiet time
SAMPLE_EVERY = 0.25  # how often the CPU time of working ranks is read
STOP_WAIT = 0.5      # between asking ranks to stop and terminating them
MAX_RANKS = 64       # processes, each with its own NIXL agent and memory
OUTPUT_TAIL = 64 << 10   # bytes of each rank's own output (NIXL's and UCX's lines) kept for a failure
PROGRESS_LOG_ENV = "MAMBAXFER_PROGRESS_LOG"   # a file that gets each rank's every state (tests wait on it)
SPAWN_CODE = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
              "from mambaxfer_cli.execute.rank_process import spawn_main; spawn_main(sys.argv[2:])")

# Rank processes: one thread for numpy/torch (one process per rank) and quiet NIXL, unless set.
RANK_DEFAULTS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                 "NIXL_LOG_LEVEL": "WARN"}

Progress = Callable[[str, str, str], None]   # (rank name, phase, detail)


class RunFailure(Exception):
    """The run could not complete (a rank died, nothing progressed, or NIXL failed): exit code 3."""


@dataclass
class Finished:
    results: dict[str, RankResult]         # by rank name: "P0", "D1"
    phases: dict[str, float]               # seconds from the start to each milestone


@dataclass
class _Rank:
    task: RankTask
    process: subprocess.Popen[bytes]
    conn: Connection
    pidfd: int | None = None       # readable once the process ended (None: polled instead)
    output: int | None = None      # the read end of the rank's stdout and stderr
    tail: bytearray = field(default_factory=bytearray)   # the last OUTPUT_TAIL bytes it wrote
    state: State = State("starting")
    seen: set[State] = field(default_factory=set)    # the states it reported
    fresh: bool = True             # its state is one it had not been in before
    cpu: int = -1                  # its CPU time at the last sample (clock ticks)
    published: dict[str, Any] = field(default_factory=dict)
    result: RankResult | None = None
    error: Failed | None = None
    closed: bool = False

    @property
    def name(self) -> str:
        return self.task.name

    @property
    def settled(self) -> bool:
        return self.result is not None or self.error is not None

    def described(self) -> str:
        return f"{self.name} {self.state.phase}" + (f" ({self.state.detail})" if self.state.detail else "")


def _spawn(task: RankTask, env: Mapping[str, str], ranks: list[_Rank]) -> None:
    """Start one rank process: its task through an unnamed file, its pipe as a descriptor."""
    parent_end, child_end = multiprocessing.Pipe()
    output, written = os.pipe()
    with tempfile.TemporaryFile() as handoff:     # unnamed: nothing is left behind, whatever happens
        pickle.dump(task, handoff)
        handoff.flush()
        handoff.seek(0)
        fds = (handoff.fileno(), child_end.fileno())
        line = [sys.executable, "-c", SPAWN_CODE, json.dumps(sys.path), *map(str, fds), str(os.getpid()),
                task.name]      # the rank's name last, for ps
        try:
            with exits.held():     # a rank started is a rank recorded, to be stopped
                process = subprocess.Popen(line, pass_fds=fds, process_group=0, env=dict(env),
                                           stdin=subprocess.DEVNULL, stdout=written, stderr=written)
                rank = _Rank(task, process, parent_end, output=output)
                ranks.append(rank)
                os.set_blocking(output, False)
                with contextlib.suppress(AttributeError, OSError):
                    rank.pidfd = os.pidfd_open(process.pid)
        except BaseException:
            if not ranks or ranks[-1].output != output:
                os.close(output)
            raise
        finally:
            child_end.close()
            os.close(written)


def _read_output(rank: _Rank) -> None:
    """Whatever the rank wrote on its stdout and stderr (only the last OUTPUT_TAIL bytes are kept)."""
    while rank.output is not None:
        try:
            chunk = os.read(rank.output, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            os.close(rank.output)
            rank.output = None
            return
        rank.tail += chunk
        del rank.tail[:-OUTPUT_TAIL]


def _save_output(ranks: Sequence[_Rank], run_id: str) -> str | None:
    """The ranks' own output in a log file of its own (None when they wrote nothing)."""
    for rank in ranks:
        _read_output(rank)
    written = [r for r in ranks if r.tail.strip()]
    if not written:
        return None
    handle, path = tempfile.mkstemp(prefix=f"mambaxfer-{run_id}-", suffix=".log")
    with os.fdopen(handle, "wb") as log:
        for rank in written:
            log.write(f"--- {rank.name} ({_exit_text(rank.process.returncode)}) ---\n".encode())
            log.write(bytes(rank.tail).rstrip(b"\n") + b"\n")
    return path


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _cpu_ticks(pid: int) -> int:
    """User and system CPU time of a process, in clock ticks (-1 when unknown)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return -1


class _Run:
    def __init__(self, ranks: list[_Rank], timeout: float, progress: Progress | None) -> None:
        self.ranks = ranks
        self.timeout = timeout
        self.progress = progress or (lambda name, phase, detail: None)
        self.started = time.monotonic()
        self.last_progress = time.monotonic()
        self.sampled = 0.0
        self.phases: dict[str, float] = {}
        self.errors: list[_Rank] = []
        self.deaths: list[_Rank] = []
        self.awaits: list[tuple[_Rank, Await]] = []
        self.meets: dict[str, list[_Rank]] = {}
        self.log = os.environ.get(PROGRESS_LOG_ENV)
        self.handlers: dict[type, Callable[[_Rank, Any], None]] = {
            State: self._on_state, Publish: self._on_publish, Await: self._on_await, Meet: self._on_meet,
            Done: self._on_done, Failed: self._on_failed}

    # --- what ranks say ---------------------------------------------------------------------------

    def _group(self, role: str | None) -> list[_Rank]:
        return [r for r in self.ranks if role is None or r.task.role == role]

    def _mark(self, milestone: str) -> None:
        self.phases.setdefault(milestone, round(time.monotonic() - self.started, 3))

    def _send(self, rank: _Rank, message: Down) -> None:
        with contextlib.suppress(OSError):     # it died; its pidfd tells
            rank.conn.send(message)

    def _on_state(self, rank: _Rank, state: State) -> None:
        """A rank's new state: progress when it had not been in it before."""
        rank.state, rank.fresh = state, state not in rank.seen
        if rank.fresh:
            rank.seen.add(state)
            rank.cpu = -1
            self.last_progress = time.monotonic()
        if self.log:
            with open(self.log, "a") as handle:
                handle.write(f"{rank.name}\t{state.phase}\t{state.detail}\n")
        self.progress(rank.name, state.phase, state.detail)

    def _on_publish(self, rank: _Rank, message: Publish) -> None:
        rank.published[message.key] = message.value
        if all(message.key in r.published for r in self._group(rank.task.role)):
            self._mark(f"{rank.task.role} ranks {message.key}")
        self._answer()

    def _on_await(self, rank: _Rank, message: Await) -> None:
        self.awaits.append((rank, message))
        self._answer()

    def _answer(self) -> None:
        for rank, message in list(self.awaits):
            group = self._group(message.role)
            if group and all(message.key in r.published for r in group):
                self.awaits.remove((rank, message))
                self._send(rank, Gathered(message.key, {r.task.rank: r.published[message.key] for r in group}))

    def _on_meet(self, rank: _Rank, message: Meet) -> None:
        here = self.meets.setdefault(message.point, [])
        here.append(rank)
        group = self._group(message.role)
        if all(r in here for r in group):
            del self.meets[message.point]
            if message.milestone:
                self._mark(f"{message.role or 'all'} ranks {message.point}")
            for r in group:
                self._send(r, Released(message.point))

    def _on_done(self, rank: _Rank, message: Done) -> None:
        rank.result = message.result
        self._on_state(rank, State("done", waiting=True))

    def _on_failed(self, rank: _Rank, message: Failed) -> None:
        rank.error = message
        self.errors.append(rank)
        self._on_state(rank, State("failed", message.message, waiting=True))

    def _handle(self, rank: _Rank, message: Up) -> None:
        if not isinstance(message, State):
            self.last_progress = time.monotonic()
        self.handlers[type(message)](rank, message)

    # --- waiting for them -------------------------------------------------------------------------

    def _drain(self, rank: _Rank) -> None:
        while not rank.closed:
            try:
                if not rank.conn.poll():
                    return
                message = rank.conn.recv()
            except (EOFError, OSError):
                rank.closed = True
                return
            self._handle(rank, message)

    def _exited(self, rank: _Rank) -> None:
        self._drain(rank)
        if not rank.settled and rank not in self.deaths:
            self.deaths.append(rank)
            self.last_progress = time.monotonic()
            self.progress(rank.name, "died", _exit_text(rank.process.returncode))

    def _step(self, wait_s: float) -> None:
        objects: dict[Any, _Rank] = {}
        for r in self.ranks:
            if not r.closed:
                objects[r.conn] = r
            if r.output is not None:
                objects[r.output] = r
            if r.process.returncode is None and r.pidfd is not None:
                objects[r.pidfd] = r
            elif r.process.returncode is None:
                wait_s = min(wait_s, 0.1)    # no pidfd here: poll
        for obj in wait(list(objects), timeout=wait_s):
            rank = objects[obj]
            if obj is rank.conn:
                self._drain(rank)
            elif obj == rank.output:
                _read_output(rank)
            else:
                rank.process.wait()      # its pidfd is readable once it ended
                self._exited(rank)
        for r in self.ranks:   # a rank that ended without our noticing
            if r.process.poll() is not None and r not in self.deaths:
                self._exited(r)

    def _sample(self) -> None:
        """A working rank in a state new to it that used the CPU since the last sample progressed."""
        if time.monotonic() - self.sampled < SAMPLE_EVERY:
            return
        self.sampled = time.monotonic()
        for rank in self.ranks:
            if rank.state.waiting or not rank.fresh or rank.settled or rank.process.returncode is not None:
                continue
            ticks = _cpu_ticks(rank.process.pid)
            if 0 <= rank.cpu < ticks:
                self.last_progress = time.monotonic()
            rank.cpu = ticks

    def _failure(self) -> Exception:
        death = self.deaths[0] if self.deaths else None
        if death is not None:
            what = f" while {death.state.phase}" + (f" ({death.state.detail})" if death.state.detail else "")
            return RunFailure(f"{death.name} died ({_exit_text(death.process.returncode)}){what}")
        first = next((r for r in self.errors if r.error and r.error.user), self.errors[0])
        assert first.error is not None
        return UserError(first.error.message) if first.error.user else RunFailure(first.error.message)

    def _stalled(self) -> RunFailure:
        """Nothing progressed for the timeout: the ranks that were working (stuck), then the waiting ones."""
        left = [r for r in self.ranks if not r.settled]
        stuck = [r.described() for r in left if not r.state.waiting]
        head = (f"timed out: {', '.join(stuck)} made no progress for {self.timeout:g}s" if stuck
                else f"timed out: nothing happened for {self.timeout:g}s")
        waiting = "; ".join(r.described() for r in left if r.state.waiting)
        return RunFailure(f"{head} (--timeout)" + (f"; {waiting}" if waiting else ""))

    def _settle(self) -> None:
        """After a failure: let what follows come in (a peer's death is the root cause of the errors
        it causes), until every rank settled or nothing failed for SETTLE seconds."""
        events, since = -1, time.monotonic()
        while not all(r.settled or r in self.deaths for r in self.ranks):
            if events != len(self.errors) + len(self.deaths):
                events, since = len(self.errors) + len(self.deaths), time.monotonic()
            left = SETTLE - (time.monotonic() - since)
            if left <= 0:
                return
            self._step(left)

    def drive(self) -> None:
        while not all(r.settled for r in self.ranks):
            if self.errors or self.deaths:
                self._settle()
                raise self._failure()
            self._sample()
            idle = time.monotonic() - self.last_progress
            if idle >= self.timeout:
                raise self._stalled()
            self._step(min(self.timeout - idle, SAMPLE_EVERY))
        if self.errors:
            raise self._failure()
        self._mark("results in")


def _ended(process: subprocess.Popen[bytes], within: float) -> bool:
    try:
        process.wait(max(within, 0.0))
        return True
    except subprocess.TimeoutExpired:
        return False


def _stop(ranks: Sequence[_Rank]) -> None:
    """Ask, then terminate, then kill: no rank survives the coordinator's return."""
    with exits.held():
        for rank in ranks:
            if rank.process.poll() is None:
                with contextlib.suppress(OSError):
                    rank.conn.send(Stop())
        end = time.monotonic() + STOP_WAIT
        for rank in ranks:
            if not _ended(rank.process, end - time.monotonic()):
                rank.process.terminate()
        for rank in ranks:
            if not _ended(rank.process, 1.0):
                rank.process.kill()
                rank.process.wait()
            rank.conn.close()
            if rank.pidfd is not None:
                os.close(rank.pidfd)
                rank.pidfd = None
            _read_output(rank)


def run_ranks(tasks: Sequence[RankTask], run_id: str, timeout: float, progress: Progress | None = None,
              forced: Mapping[str, str] | None = None, defaults: Mapping[str, str] | None = None) -> Finished:
    """Run one process per task to its end; raises UserError or RunFailure. The ranks' environment:
    this one over ``defaults`` (and RANK_DEFAULTS), ``forced`` over it."""
    if timeout <= 0:
        raise UserError("--timeout must be a positive number of seconds")
    if len(tasks) > MAX_RANKS:
        raise UserError(f"{len(tasks)} ranks would start as many processes; at most {MAX_RANKS} start")
    env = {**RANK_DEFAULTS, **(defaults or {}), **os.environ, **(forced or {})}
    ranks: list[_Rank] = []
    try:
        for task in tasks:
            _spawn(task, env, ranks)
            if progress:
                progress(task.name, "starting", "")
        run = _Run(ranks, timeout, progress)
        run.drive()
    except UserError:
        raise
    except Exception as exc:      # a failed run, or a bug (its traceback shown): say where the ranks' output went
        _stop(ranks)
        log = _save_output(ranks, run_id)
        if isinstance(exc, RunFailure):
            raise RunFailure(f"{exc}; the ranks' own output is in {log}" if log else str(exc)) from None
        if log:
            exc.add_note(f"the ranks' own output: {log}")
        raise
    finally:
        _stop(ranks)
        for rank in ranks:
            if rank.output is not None:
                os.close(rank.output)
                rank.output = None
    return Finished({r.name: r.result for r in ranks if r.result is not None}, run.phases)
