"""Spawn one process per P and D rank, walk them through start, exchange, transfer and verify,
and collect what they measured. On any failure every rank is stopped: no orphans, no hang.

Order: all ranks start (P ranks fill, D ranks poison, each registers); once every P rank listens,
D ranks learn the P side-channel ports and fetch metadata; once every D rank prepared its READs,
all of them post at once; P ranks free their memory on their consumers' notifications.
"""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import os
import pickle
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from typing import Callable

from mambaxfer_cli import exits
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.execute.tasks import DecodeTask, PrefillTask, RankTask, RunSettings, build_tasks
from mambaxfer_cli.planning.plan import Plan

MARGIN = 2.0         # at most: the ranks' deadline comes this much before the run's end, so that they
                     # can say what they were waiting for and be stopped within --timeout
SETTLE = 0.3         # after a first error, for the root cause (often a dead peer) to surface
STOP_WAIT = 0.5      # between asking ranks to stop and terminating them
MAX_RANKS = 64       # processes, each with its own NIXL agent and memory
OUTPUT_TAIL = 64 << 10   # bytes of each rank's own output (NIXL's and UCX's log lines) kept for a failure

SCHEMA = "mambaxfer.execute/v1"
_CHILD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "NIXL_LOG_LEVEL": "WARN"}


class RunFailure(Exception):
    """The run could not complete (a rank died, timed out, or NIXL failed): exit code 3."""


Progress = Callable[[str, str, str], None]   # (rank name, phase, detail)


@dataclass
class _Rank:
    task: RankTask
    process: subprocess.Popen
    conn: object
    pidfd: int | None = None       # readable once the process ended (None: polled instead)
    output: int | None = None      # the read end of the rank's stdout and stderr
    tail: bytearray = field(default_factory=bytearray)   # the last OUTPUT_TAIL bytes it wrote
    phase: str = "spawning"
    detail: str = ""
    ready: dict | None = None
    prepared: bool = False
    result: dict | None = None
    error: tuple[str, str] | None = None
    closed: bool = False
    barrier: str | None = None     # bench: the step this rank waits at

    @property
    def name(self) -> str:
        return self.task.name

    @property
    def settled(self) -> bool:
        return self.result is not None or self.error is not None


@dataclass
class DecodeOutcome:
    d_rank: int
    result: dict

    @property
    def ok(self) -> bool:
        return self.result["verdict"]["ok"]

    @property
    def seconds(self) -> float:
        return statistics.median(self.result["times"])

    @property
    def gbps(self) -> float:
        return self.result["bytes"] / self.seconds / 1e9 if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        r = self.result
        return {"d_rank": self.d_rank, "sources": r["sources"], "local_lists": r["lists"],
                "bytes": r["bytes"], "descriptors_posted": r["descs_posted"],
                "descriptors_merged": r["descs_merged"], "telemetry_bytes": r["telemetry_bytes"],
                "time_s": self.seconds, "times_s": r["times"], "gb_per_s": self.gbps,
                "xfer_us": r["xfer_us"], "prepare_s": r["prepare_s"], "verify_s": r["verify_s"],
                "verdict": r["verdict"]}


@dataclass
class Outcome:
    plan: Plan
    settings: RunSettings
    decode: list[DecodeOutcome]
    prefill: dict[int, dict]
    phases: dict[str, float] = field(default_factory=dict)   # seconds from spawn to each milestone

    @property
    def verified(self) -> bool:
        return all(d.ok for d in self.decode)

    @property
    def total_bytes(self) -> int:
        return sum(d.result["bytes"] for d in self.decode)

    def served(self, p_rank: int) -> list[dict]:
        """A two-host prefill side: each consumer of a P rank with the bytes the plan READs from it."""
        moved: dict[int, int] = {}
        for read in self.plan.descriptors.reads:
            if read.p_rank == p_rank:
                moved[read.d_rank] = moved.get(read.d_rank, 0) + int(read.remote.resolve(read.remote_ids)["size"].sum())
        return [{**c, "bytes": moved.get(c["d_rank"], 0)} for c in self.prefill[p_rank].get("served", [])]

    def to_dict(self) -> dict:
        plan, s = self.plan, self.settings
        prefill_side = s.discovery is not None and s.discovery.role == "prefill"
        return {"schema": SCHEMA, "model": plan.model.name, "semantics": plan.semantics,
                "role": s.discovery.role if s.discovery else "both",
                "p_tp": plan.prefill.tp, "d_tp": plan.decode.tp, "device": s.device, "memory": s.mem_type,
                "iters": s.iters, "request": plan.descriptors.request.to_dict(),
                "verified": None if prefill_side else self.verified,   # the decode side verifies
                "total_bytes": self.total_bytes, "phases_s": self.phases,
                "decode": [d.to_dict() for d in self.decode],
                "prefill": [{"p_rank": p, "consumers": r["consumers"], "fill_s": r["fill_s"],
                             **({"served": self.served(p)} if "served" in r else {})}
                            for p, r in sorted(self.prefill.items())]}


def check_ports(settings: RunSettings, p_tp: int) -> None:
    """With a fixed --port, P rank r listens on port + r: fail before spawning if one is taken."""
    if not settings.port:
        return
    if settings.port + p_tp - 1 > 65535:
        raise UserError(f"--port {settings.port}: P ranks need ports {settings.port}..{settings.port + p_tp - 1}")
    for rank in range(p_tp):
        port = settings.port + rank
        with socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((settings.host, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise UserError(f"--port {settings.port}: {settings.host}:{port} (P{rank}'s side channel) "
                                    f"is already in use; pick another --port, or --port 0 for free ports") from None
                raise UserError(f"--host {settings.host} --port {port}: cannot listen there: {exc.strerror}") from None


@contextlib.contextmanager
def _child_environment(settings: RunSettings):
    """Rank processes get one thread for numpy/torch (few cores, one process per rank) and quiet NIXL;
    in a two-host run NIXL's etcd settings, and no log line for each metadata request that finds
    the other side not up yet (NIXL_LOG_LEVEL set by the user wins)."""
    wanted = dict(_CHILD_ENV)
    if settings.discovery is not None:
        wanted.update(NIXL_LOG_LEVEL="FATAL", UCX_LOG_LEVEL="fatal")
    forced = settings.discovery.environment() if settings.discovery is not None else {}
    with environment(forced, defaults=wanted):
        yield


@contextlib.contextmanager
def environment(forced: dict[str, str], defaults: dict[str, str] | None = None):
    """``os.environ`` with ``forced`` set and ``defaults`` set where the user left them unset (so
    that spawned ranks inherit them), restored as it was afterwards."""
    defaults = defaults or {}
    saved = {key: os.environ.get(key) for key in [*defaults, *forced]}
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    os.environ.update(forced)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _spawn(task: RankTask, deadline: float, ranks: list[_Rank]) -> None:
    """Start one rank process, in a process group of its own: a terminal's Ctrl-C or hang-up
    reaches the process group in front, the coordinator's, and the coordinator stops every rank
    (no disposition of the coordinator's changes around a spawn, so no signal can be lost)."""
    from mambaxfer_cli.execute.rank_process import command

    parent_end, child_end = multiprocessing.Pipe()
    output, written = os.pipe()
    with tempfile.TemporaryFile() as handoff:     # unnamed: nothing is left behind, whatever happens
        pickle.dump((task, deadline), handoff)
        handoff.flush()
        handoff.seek(0)
        fds = (handoff.fileno(), child_end.fileno())
        try:
            with exits.held():     # a rank started is a rank recorded, to be stopped
                process = subprocess.Popen(command(task.name, *fds), pass_fds=fds, process_group=0, stdin=subprocess.DEVNULL,
                                           stdout=written, stderr=written)
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
    """Whatever the rank wrote on its stdout and stderr (never the user's: only the last
    OUTPUT_TAIL bytes are kept, for the log of a run that fails)."""
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


def save_output(ranks: list[_Rank], run_id: str) -> str | None:
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


class _Run:
    def __init__(self, ranks: list[_Rank], timeout: float, end: float, progress: Progress | None) -> None:
        self.ranks = ranks
        self.timeout = timeout
        self.deadline = end - _margin(timeout) / 3
        self.progress = progress or (lambda name, phase, detail: None)
        self.started = time.time()
        self.phases: dict[str, float] = {}
        self.errors: list[_Rank] = []
        self.deaths: list[_Rank] = []

    @property
    def prefill(self) -> list[_Rank]:
        return [r for r in self.ranks if isinstance(r.task, PrefillTask)]

    @property
    def decode(self) -> list[_Rank]:
        return [r for r in self.ranks if isinstance(r.task, DecodeTask)]

    def _mark(self, milestone: str) -> None:
        self.phases.setdefault(milestone, round(time.time() - self.started, 3))

    def _send(self, rank: _Rank, kind: str, payload=None) -> None:
        try:
            rank.conn.send((kind, payload))
        except OSError:
            pass  # it died; its sentinel tells

    def _handle(self, rank: _Rank, kind: str, payload) -> None:
        if kind == "phase":
            rank.phase, rank.detail = payload
            self.progress(rank.name, rank.phase, rank.detail)
        elif kind == "ready":
            rank.ready = payload or {}
            listening = self.prefill and all(r.ready is not None for r in self.prefill)   # none: a decode side
            if listening and "P ranks listening" not in self.phases:
                self._mark("P ranks listening")
                host = self.ranks[0].task.settings.host
                peers = {r.task.rank: (host, r.ready["port"]) for r in self.prefill}
                for d in self.decode:
                    self._send(d, "peers", peers)
            decoders = self.decode and all(r.ready is not None for r in self.decode)
            if decoders and "agent" in self.decode[0].ready and "D ranks registered" not in self.phases:
                self._mark("D ranks registered")     # bench: P ranks WRITE into D's memory (push)
                for p in self.prefill:
                    self._send(p, "decoders", {r.task.rank: r.ready for r in self.decode})
        elif kind == "barrier":     # bench: every rank waits here until all of them arrived
            rank.barrier = payload
            if all(r.barrier == payload for r in self.ranks):
                for r in self.ranks:
                    r.barrier = None
                    self._send(r, "go", payload)
        elif kind == "prepared":
            rank.prepared = True
            if all(d.prepared for d in self.decode):
                self._mark("D ranks prepared")
                for d in self.decode:
                    self._send(d, "go")
        elif kind == "result":
            rank.result = payload
            self.progress(rank.name, "done", "")
        elif kind == "error":
            rank.error = payload
            self.errors.append(rank)
            self.progress(rank.name, "failed", payload[1])

    def _drain(self, rank: _Rank) -> None:
        while not rank.closed:
            try:
                if not rank.conn.poll():
                    return
                kind, payload = rank.conn.recv()
            except (EOFError, OSError):
                rank.closed = True
                return
            self._handle(rank, kind, payload)

    def _exited(self, rank: _Rank) -> None:
        self._drain(rank)
        if not rank.settled and rank not in self.deaths:
            self.deaths.append(rank)
            self.progress(rank.name, "died", _exit_text(rank.process.returncode))

    def _step(self, wait_s: float) -> None:
        objects: dict = {}
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

    def _failure(self) -> Exception:
        death = self.deaths[0] if self.deaths else None
        if death is not None:
            what = (f" while {death.phase}" + (f" ({death.detail})" if death.detail else ""))
            return RunFailure(f"{death.name} died ({_exit_text(death.process.returncode)}){what}")
        first = next((r for r in self.errors if r.error[0] == "user"), self.errors[0])
        kind, message = first.error
        if kind == "user":
            return UserError(message)
        busy = [r for r in self.ranks if not r.settled]
        if "timed out" in message and busy:
            message += "; still busy: " + "; ".join(
                f"{r.name} {r.phase}" + (f" ({r.detail})" if r.detail else "") for r in busy)
        return RunFailure(message)

    def _timeout(self) -> RunFailure:
        stuck = [f"{r.name} {r.phase}" + (f" ({r.detail})" if r.detail else "")
                 for r in self.ranks if not r.settled]
        return RunFailure(f"timed out after {self.timeout:g}s (--timeout): " + "; ".join(stuck))

    def drive(self) -> None:
        while not all(r.settled for r in self.ranks):
            if self.errors or self.deaths:
                settle = time.time() + SETTLE
                while time.time() < settle and not all(r.settled or r in self.deaths for r in self.ranks):
                    self._step(max(settle - time.time(), 0.0))
                raise self._failure()
            left = self.deadline - time.time()
            if left <= 0:
                raise self._timeout()
            self._step(min(left, 0.5))
        if self.errors:
            raise self._failure()
        self._mark("results in")


def _margin(timeout: float) -> float:
    return min(MARGIN, timeout / 4)


def _ended(process: subprocess.Popen, within: float) -> bool:
    try:
        process.wait(max(within, 0.0))
        return True
    except subprocess.TimeoutExpired:
        return False


def _stop(ranks: list[_Rank]) -> None:
    """Ask, then terminate, then kill: no rank survives the coordinator's return (a signal that
    comes meanwhile is raised once they are all gone)."""
    with exits.held():
        for rank in ranks:
            if rank.process.poll() is None:
                with contextlib.suppress(OSError):
                    rank.conn.send(("stop", None))
        end = time.time() + STOP_WAIT
        for rank in ranks:
            if not _ended(rank.process, end - time.time()):
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


def execute(plan: Plan, settings: RunSettings, timeout: float, progress: Progress | None = None,
            tasks: tuple[list[PrefillTask], list[DecodeTask]] | None = None) -> Outcome:
    """Run the plan with real NIXL transfers; raises UserError (exit 2) or RunFailure (exit 3).
    ``tasks``: the ranks' tasks when the caller built them (bench), else the plan's."""
    if timeout <= 0:
        raise UserError("--timeout must be a positive number of seconds")
    if settings.iters < 1:
        raise UserError("--iters must be >= 1")
    prefill, decode = tasks if tasks is not None else build_tasks(plan, settings)
    if settings.discovery is not None:   # a two-host run: only this side's ranks run here
        prefill, decode = (prefill, []) if settings.discovery.role == "prefill" else ([], decode)
    if len(prefill) + len(decode) > MAX_RANKS:
        raise UserError(f"P TP {len(prefill)} + D TP {len(decode)} would start {len(prefill) + len(decode)} rank "
                        f"processes; execute starts at most {MAX_RANKS}")
    if settings.discovery is None:
        check_ports(settings, len(prefill))
    end = time.time() + timeout
    deadline = end - _margin(timeout)
    ranks: list[_Rank] = []
    try:
        with _child_environment(settings):
            for task in [*prefill, *decode]:
                _spawn(task, deadline, ranks)
                if progress:
                    progress(task.name, "spawned", "")
        run = _Run(ranks, timeout, end, progress)
        run.drive()
    except RunFailure as failure:
        _stop(ranks)
        log = save_output(ranks, settings.run_id)
        raise RunFailure(f"{failure}; the ranks' own output is in {log}" if log else str(failure)) from None
    except UserError:
        raise
    except Exception as exc:      # a bug: its traceback is shown, with where the ranks' output went
        _stop(ranks)
        log = save_output(ranks, settings.run_id)
        if log:
            exc.add_note(f"the ranks' own output: {log}")
        raise
    finally:
        _stop(ranks)
        for rank in ranks:
            if rank.output is not None:
                os.close(rank.output)
                rank.output = None
    return Outcome(plan, settings,
                   decode=[DecodeOutcome(r.task.rank, r.result) for r in run.decode],
                   prefill={r.task.rank: r.result for r in run.prefill}, phases=run.phases)
