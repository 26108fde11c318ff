"""A rank's NIXL agent with its registered memory, and the steps every rank takes with it. No
progress thread (NIXL 1.5.1's would take a core per rank): a rank polls its transfers itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from mambaxfer_cli.execute.channel import Channel, PeerGone, RankFailure
from mambaxfer_cli.execute.memory import RankMemory
from mambaxfer_cli.execute.nixl_api import NixlMissing, load_nixl
from mambaxfer_cli.execute.remote import nixl_said, peer_gone
from mambaxfer_cli.execute.results import Preparation, Timing
from mambaxfer_cli.execute.tasks import RankTask

Tick = Callable[[str], None]
CHECK_STOP_EVERY = 1024      # polls of a transfer's state between two looks at the coordinator's pipe


def _name(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True)
class DescriptorPairing:
    """One transfer's local and remote descriptor lists and the IDs that pair them."""

    local_key: Hashable           # pairings with equal keys share one prepared local list
    local: np.ndarray             # (N, 3) uint64 rows: address, length, device
    local_mem: str
    remote_agent: str
    remote: np.ndarray
    remote_mem: str
    local_ids: Sequence[int]      # a plan's array('q')
    remote_ids: Sequence[int]


class RankAgent:
    """A rank's agent and memory, released in the order NIXL needs however the rank ends."""

    def __init__(self, task: RankTask, ch: Channel, telemetry: bool) -> None:
        ch.phase("loading NIXL")
        try:
            api = load_nixl(task.settings.device)
        except NixlMissing as exc:
            raise RankFailure(str(exc), user=True) from None
        ch.phase("allocating", f"{task.memory.total_bytes / 2**20:.1f} MiB {task.settings.mem_type}")
        self.task = task
        self.memory = RankMemory(task.memory, task.settings.device, task.dev_id)
        self.agent = _create_agent(api, task, telemetry)
        self.registered: Any = None
        self.handles: list[Any] = []       # transfer and descriptor-list handles
        self.remotes: list[str] = []       # remote agents loaded
        self.published = False             # its metadata is in the discovery store

    def __enter__(self) -> RankAgent:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.release()
        except Exception:
            if exc is None:   # else the rank already fails: NIXL's complaints (a peer gone) must not hide why
                raise

    def register(self, ch: Channel) -> None:
        ch.phase("registering")
        self.registered = self.agent.register_memory(self.memory.regions, self.memory.mem_type)

    def poison_and_register(self, ch: Channel) -> None:
        """A D rank's start: its memory all poison (a byte no read lands stays so), then registered."""
        ch.phase("poisoning")
        self.memory.poison()
        self.memory.sync()
        self.register(ch)

    def publish(self) -> None:
        """Make this rank's agent metadata available to the other side (a two-host run)."""
        discovery = self.task.settings.discovery
        assert discovery is not None
        discovery.publish(self.agent)
        self.published = True

    def add_remote(self, metadata: bytes) -> str:
        name = _name(self.agent.add_remote_agent(metadata))
        self.remotes.append(name)
        return name

    def prepare(self, op: str, pairings: Sequence[DescriptorPairing], ch: Channel) -> tuple[list[Any], Preparation]:
        """Prepared transfers (``op``: READ or WRITE), one per pairing, and what preparing them took."""
        local: dict[Hashable, Any] = {}
        xfers = []
        prep_s = make_s = 0.0
        for pair in pairings:
            started = time.perf_counter()
            if pair.local_key not in local:
                local[pair.local_key] = self.agent.prep_xfer_dlist("NIXL_INIT_AGENT", pair.local, pair.local_mem)
                self.handles.append(local[pair.local_key])
            remote = self.agent.prep_xfer_dlist(pair.remote_agent, pair.remote, pair.remote_mem)
            self.handles.append(remote)
            prep_s += time.perf_counter() - started
            started = time.perf_counter()
            local_ids = np.asarray(pair.local_ids, dtype=np.int64).astype(np.int32)
            remote_ids = np.asarray(pair.remote_ids, dtype=np.int64).astype(np.int32)
            xfers.append(self.agent.make_prepped_xfer(op, local[pair.local_key], local_ids, remote, remote_ids, b""))
            make_s += time.perf_counter() - started
            self.handles.append(xfers[-1])
            ch.check_stop()
        return xfers, Preparation(prep_s, make_s, sum(len(p.local_ids) for p in pairings))

    def transfer(self, xfers: Sequence[Any], notif: bytes, ch: Channel, what: str = "READ") -> float:
        """Post prepared transfers and drive them to completion (a stall is the coordinator's to see)."""
        return max(self.post(xfers, notif, ch, what), default=0.0)

    def timed(self, xfers: Sequence[Any], iters: int, ch: Channel, what: str, notif: bytes,
              start: Callable[[int], None], warm_up: bool = True, targets: Sequence[str] = ()) -> Timing:
        """``iters`` timed posts, ``start(i)`` before each (-1: the untimed ``warm_up`` that connects endpoints),
        the last notifying ``notif``: per iteration its wall time and NIXL's telemetry."""
        times, post_us, xfer_us, kept = [], [], [], 0
        for i in range(-1 if warm_up else 0, iters):
            start(i)
            took = max(self.post(xfers, notif if i == iters - 1 else b"", ch, what, targets), default=0.0)
            if i < 0:
                continue
            times.append(took)
            telemetry = self.telemetry(xfers)
            post_us.append(sum(int(t.postDuration) for t in telemetry))
            xfer_us.append(max((int(t.xferDuration) for t in telemetry), default=0))
            kept = sum(int(t.descCount) for t in telemetry)
        return Timing(tuple(times), tuple(post_us), tuple(xfer_us), kept)

    def post(self, xfers: Sequence[Any], notif: bytes, ch: Channel, what: str,
             targets: Sequence[str] = ()) -> list[float]:
        """Each transfer's seconds until NIXL says it is done; ``targets``: whom each one moves bytes
        to, named when NIXL says it went away."""
        ch.waiting(f"the {what}s to complete")
        started = time.perf_counter()
        for i, xfer in enumerate(xfers):
            if self._nixl(targets, i, what, self.agent.transfer, xfer, notif) == "ERR":
                raise RankFailure(f"NIXL refused to post a {what}")
        took: list[float | None] = [None] * len(xfers)
        polls = 0
        while None in took:
            for i, xfer in enumerate(xfers):
                if took[i] is None:
                    state = self._nixl(targets, i, what, self.agent.check_xfer_state, xfer)
                    if state == "ERR":
                        raise RankFailure(f"a {what} failed")
                    if state == "DONE":
                        took[i] = time.perf_counter() - started
            polls += 1
            if polls % CHECK_STOP_EVERY == 0:
                ch.check_stop()
        return [t for t in took if t is not None]

    @staticmethod
    def _nixl(targets: Sequence[str], i: int, what: str, call: Callable[..., str], *args: Any) -> str:
        """NIXL's answer about a transfer; its error, where it says target ``i`` went away, as that."""
        try:
            return call(*args)
        except Exception as exc:
            if targets and peer_gone(exc):
                raise PeerGone(f"{targets[i]} went away during the {what} into it", nixl_said(exc)) from None
            raise

    def notified(self, peer: str, final: bytes) -> set[int]:
        """The ranks of role ``peer`` (P, D) whose agents sent ``final`` since the last look."""
        prefix = f"mambaxfer-{self.task.settings.run_id}-{peer}"
        ranks = set()
        for sender, messages in self.agent.get_new_notifs().items():
            sender = _name(sender)
            if sender.startswith(prefix) and final in messages:
                ranks.add(int(sender[len(prefix):]))
        return ranks

    def telemetry(self, xfers: Sequence[Any]) -> list[Any]:
        return [self.agent.get_xfer_telemetry(x) for x in xfers]

    def release(self) -> None:
        """Give back what the rank took from NIXL: handles, remote agents, its metadata, its memory."""
        for handle in reversed(self.handles):
            handle.release()
        self.handles = []
        for name in self.remotes:
            self.agent.remove_remote_agent(name)
        self.remotes = []
        discovery = self.task.settings.discovery
        if self.published and discovery is not None:
            discovery.withdraw(self.agent)
            self.published = False
        if self.registered is not None:
            self.agent.deregister_memory(self.registered)
            self.registered = None
        self.memory.release()


def _create_agent(api: ModuleType, task: RankTask, telemetry: bool) -> Any:
    discovery = task.settings.discovery
    port = discovery.listen_port(task.role, task.rank) if discovery else None
    config = api.nixl_agent_config(enable_prog_thread=False, backends=["UCX"], capture_telemetry=telemetry,
                                   enable_listen_thread=port is not None, listen_port=port or 0)
    try:
        agent = api.nixl_agent(task.agent, config)
    except RuntimeError as exc:
        if port is None or "listener" not in str(exc):
            raise
        raise RankFailure(f"NIXL cannot listen on port {port}: {exc} (in use?)", user=True) from None
    if "UCX" not in agent.backends:
        raise RankFailure(f"NIXL has no UCX backend here (plugins: {', '.join(agent.plugin_list)})")
    return agent
