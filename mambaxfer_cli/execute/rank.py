"""One rank process of an execute run, each its own NIXL agent.

P: fill every page with the pattern, register, answer metadata requests on the side channel, free
once every consumer's READ notification came. D: poison, register, fetch each source P's metadata,
prepare the plan's local and remote lists, post one prepared READ per source P rank with the
plan's descriptor IDs, then check every byte. Each step is reported to the coordinator; every wait
is bounded by the run's deadline; NIXL handles and registrations are released on every path.
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from multiprocessing.connection import Connection

import numpy as np

from mambaxfer_cli.planning.descriptors import nixl_rows

from mambaxfer_cli.execute import remote as two_host
from mambaxfer_cli.execute.nixl_api import NixlMissing, load_nixl
from mambaxfer_cli.execute.side_channel import PortInUse, SideChannelError, SideChannelServer, fetch
from mambaxfer_cli.execute.tasks import DecodeTask, PrefillTask, RankTask
from mambaxfer_cli.proof.pattern import fill

# Fault injection for the tests: "<rank>:<die|hang>@<point>", e.g. "P0:hang@serve".
FAULT_ENV = "MAMBAXFER_EXECUTE_FAULT"
SERVE_WAIT = 0.002      # P's poll interval between side-channel requests and notifications


class RankFailure(Exception):
    """A failure this rank can explain; ``kind`` is "user" (exit 2) or "run" (exit 3)."""

    def __init__(self, message: str, kind: str = "run") -> None:
        super().__init__(message)
        self.kind = kind


class Stopped(Exception):
    """The coordinator asked this rank to stop."""


class Channel:
    """The pipe to the coordinator: phases and results up, peers/go/stop down."""

    def __init__(self, conn: Connection, deadline: float) -> None:
        self._conn = conn
        self.deadline = deadline
        self.phase_name = "starting"

    def send(self, kind: str, payload=None) -> None:
        try:
            self._conn.send((kind, payload))
        except OSError:
            os._exit(75)  # the coordinator is gone: nobody to report to

    def phase(self, name: str, detail: str = "") -> None:
        self.phase_name = name
        self.send("phase", (name, detail))

    def left(self, waiting_for: str) -> float:
        left = self.deadline - time.time()
        if left <= 0:
            raise RankFailure(f"timed out {waiting_for}")
        return left

    def _receive(self, wait: float):
        if not self._conn.poll(wait):
            return None
        try:
            kind, payload = self._conn.recv()
        except (EOFError, OSError):
            os._exit(75)
        if kind == "stop":
            raise Stopped()
        return kind, payload

    def wait_for(self, kind: str, waiting_for: str, idle=None, every: float = 0.5):
        while True:
            message = self._receive(min(self.left(waiting_for), every))
            if message is None and idle is not None:
                idle()
            if message is not None:
                assert message[0] == kind, message
                return message[1]

    def check_stop(self) -> None:
        self._receive(0)


def _fault(task: RankTask, point: str) -> None:
    spec = os.environ.get(FAULT_ENV, "")
    if not spec.startswith(f"{task.name}:") or not spec.endswith(f"@{point}"):
        return
    action = spec[len(task.name) + 1:-len(point) - 1]
    if action == "die":
        os._exit(70)
    if action == "hang":
        while True:
            time.sleep(1)


def _watch_parent(coordinator: int) -> None:
    """Exit when the coordinator dies (even before this rank got here), so that no rank outlives it."""

    def watch() -> None:
        while os.getppid() == coordinator:
            time.sleep(0.25)
        os._exit(75)

    threading.Thread(target=watch, daemon=True).start()


def _agent(api, task: RankTask, telemetry: bool):
    # No progress thread: NIXL 1.5.1's polls without pause and would take a core per rank; the
    # rank drives progress itself (D polls its transfers, P polls for notifications).
    discovery = task.settings.discovery
    port = discovery.listen_port(task.role, task.rank) if discovery else None
    config = api.nixl_agent_config(enable_prog_thread=False, backends=["UCX"], capture_telemetry=telemetry,
                                   enable_listen_thread=port is not None, listen_port=port or 0)
    try:
        agent = api.nixl_agent(task.agent, config)
    except RuntimeError as exc:
        if port is None or "listener" not in str(exc):
            raise
        raise RankFailure(f"NIXL cannot listen on port {port}: {exc} (in use?)", kind="user") from None
    if "UCX" not in agent.backends:
        raise RankFailure(f"NIXL has no UCX backend here (plugins: {', '.join(agent.plugin_list)})")
    return agent


def _setup(task: RankTask, ch: Channel, telemetry: bool):
    from mambaxfer_cli.execute.memory import RankMemory

    ch.phase("loading NIXL")
    try:
        api = load_nixl(task.settings.device)
    except NixlMissing as exc:
        raise RankFailure(str(exc), kind="user") from None
    ch.phase("allocating", f"{task.memory.total_bytes / 2**20:.1f} MiB {task.settings.mem_type}")
    memory = RankMemory(task.memory, task.settings.device, task.dev_id)
    return api, memory, _agent(api, task, telemetry)


def _fill(task: PrefillTask, memory) -> None:
    """Every page: the pattern of what it holds (an SSM state, or attention kernel blocks)."""
    for tensor in range(task.memory.tensors):
        host = memory.host(tensor)
        for block in range(task.memory.logical_blocks):
            fill(host[block], task.pages[tensor][block], tensor, block)
        memory.store(tensor, host)
    memory.sync()


def run_prefill(task: PrefillTask, ch: Channel) -> dict:
    api, memory, agent = _setup(task, ch, telemetry=False)
    ch.phase("filling")
    started = time.perf_counter()
    _fill(task, memory)
    fill_s = time.perf_counter() - started
    _fault(task, "fill")
    ch.phase("registering")
    registered = agent.register_memory(memory.regions, memory.mem_type)
    try:
        if task.settings.discovery is not None:
            _fault(task, "serve")
            return two_host.serve(task, ch, agent, _header(task, memory), fill_s,
                                lambda message: RankFailure(message, kind="user"))
        try:
            server = SideChannelServer(task.settings.host, task.port)
        except PortInUse as exc:
            raise RankFailure(str(exc), kind="user") from None
        except SideChannelError as exc:
            raise RankFailure(str(exc)) from None
        try:
            return _serve(task, ch, agent, memory, server, fill_s)
        finally:
            server.close()
    finally:
        agent.deregister_memory(registered)
        memory.release()


def _header(task: PrefillTask, memory) -> dict:
    """What a P rank publishes besides its agent metadata: its registered regions and layout."""
    return {"agent": task.agent, "rank": task.rank, "mem_type": memory.mem_type, "dev_id": task.dev_id,
            "bases": memory.bases, "page_bytes": task.memory.page_bytes,
            "logical_blocks": task.memory.logical_blocks,
            "conv_bytes": task.layout.conv_bytes, "ssm_bytes": task.layout.ssm_bytes,
            "regions": [[address, length] for address, length, _, _ in memory.regions]}


def _serve(task: PrefillTask, ch: Channel, agent, memory, server: SideChannelServer, fill_s: float) -> dict:
    header = _header(task, memory)
    metadata = agent.get_agent_metadata()

    def reply(request: dict) -> tuple[dict, bytes]:
        _fault(task, "serve")
        return header, metadata

    ch.send("ready", {"port": server.port})
    ch.phase("serving", f"{server.host}:{server.port}")
    final = f"{task.settings.run_id}-iter{task.settings.iters - 1}".encode()
    prefix = f"mambaxfer-{task.settings.run_id}-D"
    waiting = set(task.consumers)
    while waiting:
        ch.check_stop()
        ch.left("waiting for the READ notifications of " + ", ".join(f"D{d}" for d in sorted(waiting)))
        request = server.serve(reply, SERVE_WAIT, ch.deadline)
        if request is not None:
            ch.phase("serving", f"sent metadata to D{request.get('d_rank')}")
        for sender, messages in agent.get_new_notifs().items():
            sender = sender.decode() if isinstance(sender, bytes) else sender
            if sender.startswith(prefix) and final in messages:
                waiting.discard(int(sender[len(prefix):]))
    ch.phase("freeing", "every consumer notified")
    return {"fill_s": fill_s, "consumers": list(task.consumers)}


def _check_peer(task: DecodeTask, p_rank: int, header: dict) -> None:
    want = task.prefill_memory
    layout = task.prefill_layouts[p_rank]
    expected = {"rank": p_rank, "page_bytes": want.page_bytes, "logical_blocks": want.logical_blocks,
                "conv_bytes": layout.conv_bytes, "ssm_bytes": layout.ssm_bytes}
    for key, value in expected.items():
        if header.get(key) != value:
            raise RankFailure(f"P{p_rank} publishes {key}={header.get(key)}, the plan expects {value}")
    if len(header.get("bases", ())) != want.tensors:
        raise RankFailure(f"P{p_rank} publishes a different number of registered regions than the plan's")


def _exchange(task: DecodeTask, ch: Channel, agent, remotes: list) -> dict:
    """One host: the coordinator tells each P rank's side-channel port; ask each source for its metadata."""
    ch.phase("waiting for P ranks")
    peers = ch.wait_for("peers", "waiting for the P ranks to start")
    ch.phase("exchanging")
    published = {}
    for p_rank in task.sources:
        host, port = peers[p_rank]
        ch.phase("exchanging", f"asking P{p_rank} at {host}:{port}")
        try:
            header, blob = fetch(host, port, {"d_rank": task.rank}, ch.deadline, f"P{p_rank}")
        except SideChannelError as exc:
            raise RankFailure(str(exc)) from None
        _check_peer(task, p_rank, header)
        name = agent.add_remote_agent(blob)
        remotes.append(name.decode() if isinstance(name, bytes) else name)
        published[p_rank] = (remotes[-1], header)
    return published


def run_decode(task: DecodeTask, ch: Channel) -> dict:
    from mambaxfer_cli.execute.verify import verify_decode

    api, memory, agent = _setup(task, ch, telemetry=True)
    ch.phase("poisoning")
    memory.poison()
    memory.sync()
    ch.phase("registering")
    registered = agent.register_memory(memory.regions, memory.mem_type)
    lists, xfers, remotes = [], [], []
    try:
        ch.send("ready")
        discovery = task.settings.discovery
        if discovery is not None:
            ch.phase("exchanging", "finding the P ranks")
            published = two_host.connect(task, ch, agent, lambda p, header: _check_peer(task, p, header),
                                       lambda message: RankFailure(message, kind="user"))
            remotes.extend(name for name, _ in published.values())
        else:
            published = _exchange(task, ch, agent, remotes)
        _fault(task, "prepare")
        ch.phase("preparing")
        started = time.perf_counter()
        local_handles = {}
        posted = moved = 0
        for read in task.reads:
            if read.local_list not in local_handles:
                table = nixl_rows(read.local, memory.bases, task.memory.page_bytes, task.dev_id)
                local_handles[read.local_list] = agent.prep_xfer_dlist("NIXL_INIT_AGENT", table, memory.mem_type)
                lists.append(local_handles[read.local_list])
            name, peer = published[read.p_rank]
            table = nixl_rows(read.remote, peer["bases"], peer["page_bytes"], peer["dev_id"])
            remote = agent.prep_xfer_dlist(name, table, peer["mem_type"])
            lists.append(remote)
            xfers.append(agent.make_prepped_xfer(
                "READ", local_handles[read.local_list], read.local_ids.astype(np.int32),
                remote, read.remote_ids.astype(np.int32), b""))
            posted += len(read.local_ids)
            moved += int(read.local.resolve(read.local_ids)["size"].sum())
        prepare_s = time.perf_counter() - started
        ch.send("prepared")
        ch.phase("waiting for go")
        sources = {p: name for p, (name, _) in published.items()} if discovery else {}
        ch.wait_for("go", "waiting for every D rank to prepare",
                    idle=lambda: two_host.ping_sources(agent, sources), every=two_host.PING_EVERY)
        _fault(task, "transfer")
        times = []
        for iteration in range(task.settings.iters):
            ch.phase("transferring", f"iteration {iteration + 1}/{task.settings.iters}")
            if iteration:
                memory.poison()
            memory.sync()
            times.append(_transfer(agent, xfers, f"{task.settings.run_id}-iter{iteration}".encode(), ch))
        telemetry = [agent.get_xfer_telemetry(x) for x in xfers]
        ch.phase("verifying")
        started = time.perf_counter()
        verdict = verify_decode(task, [memory.fetch(i) for i in range(memory.count)])
        return {"sources": list(task.sources), "lists": sorted(local_handles), "bytes": moved,
                "descs_posted": posted, "descs_merged": sum(int(t.descCount) for t in telemetry),
                "telemetry_bytes": sum(int(t.totalBytes) for t in telemetry),
                "xfer_us": max((int(t.xferDuration) for t in telemetry), default=0),
                "times": times, "prepare_s": prepare_s, "verify_s": time.perf_counter() - started,
                "verdict": verdict.to_dict()}
    finally:
        release(agent, xfers + lists, remotes, registered, memory, task.settings.discovery)


def release(agent, handles: list, remotes: list, registered, memory, discovery=None) -> None:
    """Give back what a rank took from NIXL, in the order it needs: transfer and list handles,
    remote agents, its entry in the discovery store, then its registered memory."""
    for handle in handles:
        handle.release()
    for name in remotes:
        agent.remove_remote_agent(name)
    if discovery is not None:
        discovery.withdraw(agent)
    agent.deregister_memory(registered)
    memory.release()


def _transfer(agent, xfers: list, notif: bytes, ch: Channel, what: str = "READ") -> float:
    """Post prepared transfers and drive them to completion (every wait bounded); seconds taken."""
    started = time.perf_counter()
    for xfer in xfers:
        if agent.transfer(xfer, notif) == "ERR":
            raise RankFailure(f"NIXL refused to post a {what}")
    pending, spins = list(xfers), 0
    while pending:
        states = [agent.check_xfer_state(x) for x in pending]
        if "ERR" in states:
            raise RankFailure(f"a {what} failed")
        pending = [x for x, state in zip(pending, states) if state != "DONE"]
        spins += 1
        if spins % 1024 == 0:
            ch.left(f"waiting for the {what}s to complete")
    return time.perf_counter() - started


def rank_main(task: RankTask, deadline: float, conn: Connection, coordinator: int) -> None:
    """Entry point of a rank process, spawned by the coordinator (whose pid is ``coordinator``)."""
    _watch_parent(coordinator)
    ch = Channel(conn, deadline)
    try:
        if task.settings.bench is not None:
            from mambaxfer_cli.execute import bench_rank

            result = (bench_rank.run_prefill if isinstance(task, PrefillTask) else bench_rank.run_decode)(task, ch)
        else:
            result = run_prefill(task, ch) if isinstance(task, PrefillTask) else run_decode(task, ch)
        ch.send("result", result)
    except Stopped:
        pass
    except two_host.PeerGone as exc:
        ch.send("error", ("run", f"{task.name}: {exc} (while {ch.phase_name})"))
    except RankFailure as exc:
        ch.send("error", (exc.kind, f"{task.name}: {exc}"))
    except Exception as exc:  # NIXL raises its own types (nixlRemoteDisconnectError, ...)
        traceback.print_exc()    # into the rank's own output, which a failed run's log keeps
        ch.send("error", ("run", f"{task.name}: {type(exc).__name__}: {exc} (while {ch.phase_name})"))
    finally:
        conn.close()
