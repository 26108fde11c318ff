"""The steps of a bench run inside one rank process (see ``execute.bench``).

Both directions between the same agents and the same registered memory (one region per rank):
pull, D posting prepared READs, and push, P posting prepared WRITEs into D's memory, each for
every variant (the plan as planned, coalesced, and the limit: one descriptor per source P rank
moving the same bytes). Before each variant D poisons its memory; after it D checks every byte.
All ranks step together through the coordinator's barriers.
"""

from __future__ import annotations

import os
import time

import numpy as np

from mambaxfer_cli.planning.descriptors import nixl_rows

from mambaxfer_cli.execute.bench import LIMIT, limit_chunks, limit_verdict
from mambaxfer_cli.execute.rank import (
    SERVE_WAIT, Channel, RankFailure, _exchange, _fill, _header, _setup, _transfer, release,
)
from mambaxfer_cli.execute.side_channel import PortInUse, SideChannelError, SideChannelServer
from mambaxfer_cli.execute.tasks import DecodeTask, PrefillTask

DIRECTIONS = ("READ", "WRITE")


def _barrier(ch: Channel, name: str, idle=None) -> None:
    ch.send("barrier", name)
    got = ch.wait_for("go", f"waiting for every rank at '{name}'", idle=idle, every=SERVE_WAIT if idle else 0.5)
    if got != name:
        raise RankFailure(f"out of step: at '{name}', the coordinator released '{got}'")


def _iterations(agent, xfers: list, iters: int, ch: Channel, start, last_notif: bytes = b"") -> dict:
    """One untimed warm-up (it connects endpoints), then ``iters`` timed posts; before each, every
    rank meets at ``start(i)`` so that concurrent initiators post together. Per iteration: its
    wall time and NIXL's telemetry over the transfers."""
    times, post_us, xfer_us, kept = [], [], [], []
    for i in range(-1, iters):
        start(i)
        took = _transfer(agent, xfers, last_notif if i == iters - 1 else b"", ch, "transfer")
        if i < 0:
            continue
        times.append(took)
        telemetry = [agent.get_xfer_telemetry(x) for x in xfers]
        post_us.append(sum(int(t.postDuration) for t in telemetry))
        xfer_us.append(max((int(t.xferDuration) for t in telemetry), default=0))
        kept.append(sum(int(t.descCount) for t in telemetry))
    return {"times": times, "post_us": post_us, "xfer_us": xfer_us, "descs_kept": kept[-1]}


def _follow(ch: Channel, step: str, iters: int, idle) -> None:
    """A rank that does not post in this step meets the initiators at each iteration's start."""
    for i in range(-1, iters):
        _barrier(ch, f"{step}:{i}", idle=idle)


def _prepare(agent, op: str, pairs, ch: Channel) -> tuple[list, list, dict]:
    """``pairs``: (local key, local table, remote name, remote table, mem type, local ids, remote ids).
    Local lists are prepared once per key. Returns transfers, handles to release, and times."""
    local, handles, xfers = {}, [], []
    prep_s = make_s = 0.0
    posted = 0
    for key, l_table, l_mem, r_name, r_table, r_mem, l_ids, r_ids in pairs:
        started = time.perf_counter()
        if key not in local:
            local[key] = agent.prep_xfer_dlist("NIXL_INIT_AGENT", l_table, l_mem)
            handles.append(local[key])
        remote = agent.prep_xfer_dlist(r_name, r_table, r_mem)
        handles.append(remote)
        prep_s += time.perf_counter() - started
        started = time.perf_counter()
        xfers.append(agent.make_prepped_xfer(op, local[key], np.asarray(l_ids, dtype=np.int32), remote,
                                             np.asarray(r_ids, dtype=np.int32), b""))
        make_s += time.perf_counter() - started
        posted += len(l_ids)
    ch.check_stop()
    return xfers, handles, {"prep_s": prep_s, "make_s": make_s, "descs_posted": posted}


UCX_LOG_BYTES = 1 << 20      # UCX's info log of one rank: its endpoints' configurations (a few KiB)


def keep_ucx_log() -> int:
    """Have UCX log into an unnamed file of this process (nothing left on disk, whatever
    happens); before NIXL loads UCX. Returns the file's descriptor."""
    fd = os.memfd_create("mambaxfer-ucx-log")
    os.environ["UCX_LOG_FILE"] = f"/proc/self/fd/{fd}"
    os.environ["UCX_LOG_FILE_SIZE"] = str(UCX_LOG_BYTES)
    return fd


def ucx_config_lines(fd: int) -> list[str]:
    """This process's UCX endpoint-configuration lines (UCX logs them at info level); C stdio
    is flushed first, as the process may be ended before it exits."""
    import ctypes

    ctypes.CDLL(None).fflush(None)
    with open(f"/proc/self/fd/{fd}", errors="replace") as handle:
        return [line.rstrip("\n") for line in handle if " cfg#" in line]


def _one(addr: int, size: int, dev: int) -> np.ndarray:
    return np.array([[addr, size, dev]], dtype=np.uint64)


def run_decode(task: DecodeTask, ch: Channel) -> dict:
    spec = task.settings.bench
    ucx_log = keep_ucx_log()
    api, memory, agent = _setup(task, ch, telemetry=True)
    memory.poison()
    memory.sync()
    registered = agent.register_memory(memory.regions, memory.mem_type)
    handles, remotes = [], []
    try:
        ch.send("ready", {"agent": task.agent, "metadata": agent.get_agent_metadata(), "bases": memory.bases,
                          "mem_type": memory.mem_type, "dev_id": task.dev_id, "page_bytes": task.memory.page_bytes})
        published = _exchange(task, ch, agent, remotes)
        ch.phase("preparing")
        notes: dict[str, list] = {}

        def pump() -> None:
            for sender, messages in agent.get_new_notifs().items():
                notes.setdefault(sender.decode() if isinstance(sender, bytes) else sender, []).extend(messages)

        xfers, prep = {}, {}
        for name, reads in spec.variants:
            mine = reads.get(task.rank, ())
            pairs = []
            for read in mine:
                r_name, peer = published[read.p_rank]
                pairs.append((read.local_list, nixl_rows(read.local, memory.bases, task.memory.page_bytes, task.dev_id),
                              memory.mem_type, r_name,
                              nixl_rows(read.remote, peer["bases"], peer["page_bytes"], peer["dev_id"]), peer["mem_type"],
                              read.local_ids, read.remote_ids))
            xfers[name], got, prep[name] = _prepare(agent, "READ", pairs, ch)
            handles.extend(got + xfers[name])
        pairs = []
        for p_rank, offset, size in limit_chunks(task.reads):
            r_name, peer = published[p_rank]
            pairs.append((f"limit:{p_rank}", _one(memory.bases[0] + offset, size, task.dev_id), memory.mem_type,
                          r_name, _one(peer["regions"][0][0], size, peer["dev_id"]), peer["mem_type"], [0], [0]))
        xfers[LIMIT], got, prep[LIMIT] = _prepare(agent, "READ", pairs, ch)
        handles.extend(got + xfers[LIMIT])
        _barrier(ch, "prepared")
        results = {}
        for direction in DIRECTIONS:
            for name in spec.order:
                step = f"{direction}:{name}"
                memory.poison()
                memory.sync()
                _barrier(ch, step)
                ch.phase("transferring", f"{direction} {name}")
                if direction == "READ":
                    run = _iterations(agent, xfers[name], spec.iters, ch,
                                      lambda i, step=step: _barrier(ch, f"{step}:{i}"))
                else:   # P writes: keep this agent progressing, and keep the notifications it gets
                    _follow(ch, step, spec.iters, pump)
                    _wait_notifs(notes, pump, ch, {f"P{p}" for p in task.sources}, f"{step}:done".encode(), task)
                    run = {}
                memory.sync()
                ch.phase("verifying", f"{direction} {name}")
                regions = [memory.fetch(i) for i in range(memory.count)]
                if name == LIMIT:
                    verdict = limit_verdict(task, regions)
                else:
                    from mambaxfer_cli.execute.verify import verify_decode

                    verdict = verify_decode(spec.decode_tasks[name][task.rank], regions).to_dict()
                results[step] = {**run, **prep[name], "verdict": verdict}
                _barrier(ch, f"{step}:checked")
        return {"steps": results, "sources": list(task.sources), "ucx": ucx_config_lines(ucx_log)}
    finally:
        release(agent, handles, remotes, registered, memory)


def _wait_notifs(notes: dict, pump, ch: Channel, senders: set[str], message: bytes, task) -> None:
    prefix = f"mambaxfer-{task.settings.run_id}-"
    waiting = set(senders)
    while waiting:
        ch.left("waiting for the WRITE notifications of " + ", ".join(sorted(waiting)))
        pump()
        for sender, messages in notes.items():
            if message in messages and sender.startswith(prefix):
                waiting.discard(sender[len(prefix):])
        if waiting:
            time.sleep(0.0002)


def run_prefill(task: PrefillTask, ch: Channel) -> dict:
    spec = task.settings.bench
    ucx_log = keep_ucx_log()
    api, memory, agent = _setup(task, ch, telemetry=True)
    _fill(task, memory)
    registered = agent.register_memory(memory.regions, memory.mem_type)
    handles, remotes = [], []
    try:
        try:
            server = SideChannelServer(task.settings.host, task.port)
        except (PortInUse, SideChannelError) as exc:
            raise RankFailure(str(exc)) from None
        header, metadata = _header(task, memory), agent.get_agent_metadata()
        unserved = set(task.consumers)

        def serve() -> None:
            """While waiting: drive the agent (no progress thread: D's READs need this rank's
            progress) and answer the D ranks that fetch this rank's metadata."""
            agent.get_new_notifs()
            if unserved:
                request = server.serve(lambda r: (header, metadata), 0, ch.deadline)
                if request is not None:
                    unserved.discard(request.get("d_rank"))

        try:
            ch.send("ready", {"port": server.port})
            ch.phase("serving")
            decoders = ch.wait_for("decoders", "waiting for the D ranks to register", idle=serve, every=SERVE_WAIT)
            names = {}
            for d in task.consumers:
                name = agent.add_remote_agent(decoders[d]["metadata"])
                names[d] = name.decode() if isinstance(name, bytes) else name
                remotes.append(names[d])
            xfers, prep = {}, {}
            for variant, reads in spec.variants:
                pairs = []
                for d in task.consumers:
                    peer = decoders[d]
                    for read in reads.get(d, ()):
                        if read.p_rank != task.rank:
                            continue
                        pairs.append((read.remote, nixl_rows(read.remote, memory.bases, task.memory.page_bytes, task.dev_id),
                                      memory.mem_type, names[d],
                                      nixl_rows(read.local, peer["bases"], peer["page_bytes"], peer["dev_id"]),
                                      peer["mem_type"], read.remote_ids, read.local_ids))
                xfers[variant], got, prep[variant] = _prepare(agent, "WRITE", pairs, ch)
                handles.extend(got + xfers[variant])
            pairs = []
            for d in task.consumers:
                peer = decoders[d]
                for p_rank, offset, size in limit_chunks(spec.variants[0][1][d]):
                    if p_rank == task.rank:
                        pairs.append((f"limit:{d}", _one(memory.bases[0], size, task.dev_id), memory.mem_type, names[d],
                                      _one(peer["bases"][0] + offset, size, peer["dev_id"]), peer["mem_type"],
                                      [0], [0]))
            xfers[LIMIT], got, prep[LIMIT] = _prepare(agent, "WRITE", pairs, ch)
            handles.extend(got + xfers[LIMIT])
            _barrier(ch, "prepared", idle=serve)
            results = {}
            for direction in DIRECTIONS:
                for name in spec.order:
                    step = f"{direction}:{name}"
                    _barrier(ch, step, idle=serve)
                    if direction == "WRITE":
                        ch.phase("transferring", f"WRITE {name}")
                        start = lambda i, step=step: _barrier(ch, f"{step}:{i}", idle=serve)  # noqa: E731
                        results[step] = {**_iterations(agent, xfers[name], spec.iters, ch, start,
                                                       f"{step}:done".encode()), **prep[name]}
                    else:
                        _follow(ch, step, spec.iters, serve)
                    _barrier(ch, f"{step}:checked", idle=serve)
            return {"steps": results, "consumers": list(task.consumers), "ucx": ucx_config_lines(ucx_log)}
        finally:
            server.close()
    finally:
        release(agent, handles, remotes, registered, memory)
