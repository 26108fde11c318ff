"""``execute --engine sglang`` on two hosts (docs/sglang.md, "Two hosts"): each side's ranks in its
own command, kept in step over NIXL's metadata exchange and notifications."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

from mambaxfer_cli.engines.sglang.plan import SGLangPlan
from mambaxfer_cli.execute import agreement
from mambaxfer_cli.execute.agent import RankAgent
from mambaxfer_cli.execute.channel import Channel, PeerGone, RankFailure
from mambaxfer_cli.execute.coordinator import Progress, run_ranks
from mambaxfer_cli.execute.difference import comparable
from mambaxfer_cli.execute.discovery import Discovery
from mambaxfer_cli.execute.faults import fault
from mambaxfer_cli.execute.remote import (
    PING_EVERY, QUIET, Inbox, Peers, admit, greet, linger, ranks_text, wait_for,
)
from mambaxfer_cli.engines.sglang.transfer.run import (
    MIN_ROUNDS, SLOTS, SlotDecodeTask, SlotOutcome, SlotPrefillTask,
    chosen_writes, poison, run_tasks, transfer,
)
from mambaxfer_cli.engines.sglang.transfer.rank import (
    Check, check_decode_layout, fill_and_register, fill_slot, planned_pairings, poison_all, published_layout,
    round_notification, write_timings,
)
from mambaxfer_cli.engines.sglang.transfer.results import SlotDecodeResult, SlotPrefillResult, WriteTiming
from mambaxfer_cli.execute.tasks import RunSettings

def geometry(plan: SGLangPlan, semantics: str, rounds: int) -> dict[str, Any]:
    """What the two sides compare, in the order that names the cause first (the model, then the run's
    settings, entries and slots, then hashes of the descriptors and the whole plan)."""
    moved = transfer(plan, semantics)
    model = comparable({"model": plan.model.to_dict()})["model"]
    model["config_hash"] = agreement.digest(model)

    def entries(side: tuple[Any, ...]) -> list[dict[str, Any]]:
        return [{"field": e.field, "layer_id": e.layer_id, "item_len": e.item_len} for e in side]

    return {"model": model, "semantics": semantics, "tp": {"prefill": plan.p_tp, "decode": plan.d_tp},
            "release": plan.release.version, "backend": plan.backend, "rounds": rounds,
            "entries": {"prefill": entries(moved.prefill_entries), "decode": entries(moved.decode_entries)},
            "slots": SLOTS,
            "descriptors_hash": agreement.digest([asdict(d) for d in moved.descriptors]),
            "plan_hash": agreement.digest(comparable(plan.to_dict()))}


# --- what a side's ranks return ---------------------------------------------------------------------

@dataclass(frozen=True)
class RemoteDecodeResult(SlotDecodeResult):
    received: tuple[SlotPrefillResult, ...] = ()    # each writer's WRITE into this rank, as it reported it


@dataclass(frozen=True)
class Answer:
    """A D rank's verdict, as it answered its writer after the last round."""

    d_rank: int
    ok: bool
    bad_bytes: int


@dataclass(frozen=True)
class RemotePrefillResult(SlotPrefillResult):
    answers: tuple[Answer, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "decode_verdicts": [asdict(a) for a in self.answers]}


@dataclass
class SideOutcome(SlotOutcome):
    """One side's run: the decode side's checks (with what its writers reported), or the prefill
    side's WRITEs (with what each D rank answered)."""

    role: str = "decode"
    answers: list[Answer] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        if self.role == "prefill":
            return all(a.ok for a in self.answers)
        return all(d.ok for d in self.decode)

    def to_dict(self) -> dict[str, Any]:
        document = {**super().to_dict(), "role": self.role}
        if self.role == "prefill":
            document["bad_bytes"] = sum(a.bad_bytes for a in self.answers)
        return document


# --- the run of one side ----------------------------------------------------------------------------

def settings_for(plan: SGLangPlan, semantics: str, discovery: Discovery, device: str, gpus: int,
                 iters: int) -> RunSettings:
    """This side's settings, the discovery checked before any rank starts; raises UserError."""
    from mambaxfer_cli.execute.discovery import check_etcd, check_listen

    if discovery.mode == "etcd":
        check_etcd(discovery)
    elif discovery.role == "prefill":
        check_listen(discovery, plan.p_tp)
    return RunSettings(discovery.run_id, device, gpus, discovery.host, discovery.port, iters, discovery=discovery,
                       geometry=geometry(chosen_writes(plan, semantics), semantics, max(iters, MIN_ROUNDS)))


def execute_side(plan: SGLangPlan, semantics: str, settings: RunSettings, timeout: float,
                 progress: Progress | None = None) -> SideOutcome:
    """Run this side's ranks (``settings.discovery.role``); raises UserError (exit 2) or RunFailure (exit 3)."""
    discovery = settings.discovery
    assert discovery is not None
    rounds, moved, prefill, decode = run_tasks(plan, semantics, settings)
    mine: list[SlotPrefillTask] | list[SlotDecodeTask] = prefill if discovery.role == "prefill" else decode
    # This host's GPUs are this side's alone: its ranks go round robin over them from the first.
    tasks = [replace(t, dev_id=settings.dev(t.rank)) for t in mine]
    finished = run_ranks(tasks, settings.run_id, timeout, progress, forced=discovery.environment(),
                         defaults=QUIET)
    results = [finished.results[t.name] for t in tasks]
    if discovery.role == "prefill":
        written = [r for r in results if isinstance(r, RemotePrefillResult)]
        answers = sorted({a.d_rank: a for r in written for a in r.answers}.values(), key=lambda a: a.d_rank)
        return SideOutcome(plan, semantics, settings, rounds, decode=[], prefill=list(written),
                           phases=finished.phases, moved=moved, role="prefill", answers=answers)
    checked = [r for r in results if isinstance(r, RemoteDecodeResult)]
    return SideOutcome(plan, semantics, settings, rounds, decode=list(checked), prefill=_writers(checked),
                       phases=finished.phases, moved=moved, role="decode")


def _writers(checked: list[RemoteDecodeResult]) -> list[SlotPrefillResult]:
    """The P ranks' WRITEs into this side's D ranks, from what each reported."""
    by_rank: dict[int, list[SlotPrefillResult]] = {}
    for result in checked:
        for got in result.received:
            by_rank.setdefault(got.p_rank, []).append(got)
    return [SlotPrefillResult(p, got[0].fill_s, got[0].prepare_s,
                              tuple(sorted((w for g in got for w in g.writes), key=lambda w: w.d_rank)))
            for p, got in sorted(by_rank.items())]


# --- the prefill side: the initiator, whose ranks the decode side finds --------------------------

def prefill(task: SlotPrefillTask, ch: Channel) -> RemotePrefillResult:
    discovery = task.settings.discovery
    assert discovery is not None
    with RankAgent(task, ch, telemetry=True) as node:
        fill_s = fill_and_register(task, ch, node)
        node.publish()
        ch.phase("serving", discovery.where(task.rank))
        inbox = Inbox(node.agent)
        peers = Peers(node.agent, "D", inbox)
        fault(task, "serve")
        hellos: dict[int, dict[str, Any]] = {}
        admit(task, ch, node.agent, node.remotes, inbox, peers, [d for d, _ in task.writes], partial(_refusal, task),
              "writes into", hellos, loaded=lambda hello: (_entries(node.agent, hello["header"]),))
        pairings = planned_pairings(task, node, [(peers.names[d], hellos[d]["header"]) for d, _ in task.writes])
        fault(task, "prepare")
        ch.phase("preparing")
        xfers, prep = node.prepare("WRITE", pairings, ch)
        ch.meet("prepared", "P", "every P rank to prepare", milestone=True, idle=peers.ping, every=PING_EVERY)
        times: list[list[float]] = [[] for _ in xfers]
        for round_ in range(task.rounds):
            if round_:
                ch.phase("filling", f"round {round_ + 1}")
                fill_slot(task, node.memory, task.slot, round_, ch.progress)
            ch.phase("transferring", f"round {round_ + 1}/{task.rounds}")
            wait_for(ch, inbox, peers, partial(_not_ready, task, inbox, peers, round_))
            fault(task, "transfer")
            try:
                took = node.post(xfers, round_notification(task, round_), ch, "WRITE",
                                 [f"D{d} ({peers.names[d]})" for d, _ in task.writes])
            except PeerGone:
                raise
            except RankFailure:
                peers.last = 0.0
                peers.ping()        # a D rank gone says so; otherwise the failure as NIXL said it
                raise
            for xfer_times, seconds in zip(times, took):
                xfer_times.append(seconds)
        writes = write_timings(task, node.telemetry(xfers), times)
        prepare_s = prep.prep_s + prep.make_s
        for timing in writes:
            peers.tell(timing.d_rank, agreement.encode("wrote", p_rank=task.rank, fill_s=fill_s, prepare_s=prepare_s,
                                                       **{k: v for k, v in asdict(timing).items() if k != "d_rank"}))
        ch.phase("finishing")

        def answered(d_rank: int) -> bool:
            return inbox.find(peers.names[d_rank], "done") is not None

        wait_for(ch, inbox, peers, lambda: None if all(answered(d) for d in peers.names)
               else "the verdicts of " + ranks_text("D", (d for d in peers.names if not answered(d))), answered)
        answers = []
        for d_rank, name in sorted(peers.names.items()):
            done = inbox.find(name, "done") or {}
            answers.append(Answer(d_rank, bool(done.get("ok")), int(done.get("bad_bytes", 0))))
        return RemotePrefillResult(task.rank, fill_s, prepare_s, writes, answers=tuple(answers))


def _not_ready(task: SlotPrefillTask, inbox: Inbox, peers: Peers, round_: int) -> str | None:
    waiting = [d for d, _ in task.writes if inbox.find(peers.names[d], "ready", round=round_) is None]
    return f"{ranks_text('D', waiting)} to poison for round {round_ + 1}" if waiting else None


def _refusal(task: SlotPrefillTask, hello: dict[str, Any]) -> str | None:
    """Why this P rank cannot write into the D rank that said ``hello``; None when it can."""
    d_rank = hello.get("d_rank")
    if d_rank not in [d for d, _ in task.writes]:
        return f"D{d_rank} is not written by P{task.rank} in this plan"
    try:
        check_decode_layout(task, d_rank, hello.get("header") or {})
    except RankFailure as exc:
        return str(exc)
    return None


def _entries(agent: Any, header: dict[str, Any]) -> Any:
    """A D rank's registered entries, as NIXL descriptors (to see that its metadata holds them)."""
    size = int(header["slots"])
    regions = [(int(base), int(n) * size, int(header["dev_id"]))
               for base, n in zip(header["bases"], header["item_lens"])]
    return agent.get_xfer_descs(regions, header["mem_type"])


# --- the decode side: the target, whose ranks reach the prefill side -----------------------------

def decode(task: SlotDecodeTask, ch: Channel) -> RemoteDecodeResult:
    with RankAgent(task, ch, telemetry=False) as node:
        node.poison_and_register(ch)
        node.publish()
        inbox = Inbox(node.agent)
        peers = Peers(node.agent, "P", inbox)
        # SGLang's registration of its destination: this rank's entries, with its geometry.
        hello = agreement.encode("hello", d_rank=task.rank, geometry=task.settings.geometry,
                                 header=published_layout(task, node))
        greet(task, ch, node.agent, node.remotes, inbox, peers, task.writers, hello)
        fault(task, "prepare")
        ch.meet("prepared", "D", "every D rank to be welcomed", milestone=True, idle=peers.ping, every=PING_EVERY)
        check = Check(task)
        for round_ in range(task.rounds):
            if round_:
                ch.phase("poisoning", f"round {round_ + 1}")
                poison_all(node.memory, poison(round_))
            fault(task, "transfer")
            for p in task.writers:
                peers.tell(p, agreement.encode("ready", d_rank=task.rank, round=round_))
            ch.phase("receiving", f"round {round_ + 1}/{task.rounds}")
            fault(task, "receive")      # while the P ranks write into it
            final = round_notification(task, round_)
            wait_for(ch, inbox, peers, partial(_not_written, task, inbox, peers, final))
            ch.phase("verifying", f"round {round_ + 1}/{task.rounds}")
            check.round(node.memory, round_, ch.progress)
        checked = check.result()
        ch.phase("finishing")

        def reported(p: int) -> bool:
            return inbox.find(peers.names[p], "wrote") is not None

        wait_for(ch, inbox, peers, lambda: None if all(reported(p) for p in task.writers)
               else "the WRITE timings of " + ranks_text("P", (p for p in task.writers if not reported(p))))
        received = tuple(_received(p, inbox.find(peers.names[p], "wrote") or {}, task.rank) for p in task.writers)
        for p in task.writers:
            peers.tell(p, agreement.encode("done", d_rank=task.rank, ok=checked.ok, bad_bytes=checked.bad))
        linger(node.agent)     # so that the verdicts reach the P ranks before this agent goes
        return RemoteDecodeResult(checked.d_rank, checked.writers, checked.entries, checked.checked_bytes,
                                  checked.fields, checked.first, checked.verify_s, received=received)


def _not_written(task: SlotDecodeTask, inbox: Inbox, peers: Peers, final: bytes) -> str | None:
    waiting = [p for p in task.writers if (peers.names[p], final) not in inbox.plain]
    return f"the WRITE notifications of {ranks_text('P', waiting)}" if waiting else None


def _received(p_rank: int, wrote: dict[str, Any], d_rank: int) -> SlotPrefillResult:
    timing = WriteTiming(d_rank, int(wrote.get("descriptors", 0)), int(wrote.get("descriptors_merged", 0)),
                         int(wrote.get("bytes", 0)), tuple(float(t) for t in wrote.get("times_s", ())))
    return SlotPrefillResult(p_rank, float(wrote.get("fill_s", 0.0)), float(wrote.get("prepare_s", 0.0)), (timing,))
