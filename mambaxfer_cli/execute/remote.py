"""A rank's side of a two-host run: control messages and liveness over NIXL notifications. Both
sides ping each other every PING_EVERY seconds, so that one that died ends the other at once."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from typing import Any, Callable, Sequence

from mambaxfer_cli.execute import agreement
from mambaxfer_cli.execute.channel import WAIT_ROUND, Channel, PeerGone, RankFailure
from mambaxfer_cli.execute.tasks import RankTask

REQUEST_EVERY = 0.5   # metadata requests are asynchronous and find nothing until the peer is up
PING_EVERY = 0.5
QUIET = {"NIXL_LOG_LEVEL": "FATAL", "UCX_LOG_LEVEL": "fatal"}   # no line per metadata request too early
LINGER = 0.5          # after a refusal, so that it reaches the other side before this agent goes


def peer_gone(exc: Exception) -> bool:
    """Whether NIXL's error says the peer went away (a disconnect, or its metadata gone)."""
    return type(exc).__name__ in ("nixlRemoteDisconnectError", "nixlNotFoundError")


def nixl_said(exc: Exception) -> str:
    """NIXL's error in one line: its type and its first line."""
    first = next(iter(str(exc).strip().splitlines()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def notify(agent: Any, name: str, message: bytes) -> None:
    try:
        agent.send_notif(name, message)
    except Exception as exc:
        if peer_gone(exc):
            raise PeerGone(f"{name} went away", nixl_said(exc)) from None
        raise


def linger(agent: Any) -> None:
    end = time.monotonic() + LINGER
    while time.monotonic() < end:
        agent.get_new_notifs()
        time.sleep(WAIT_ROUND)


def refuse(agent: Any, sender: str, p_rank: int, problem: str, leaving: bool) -> None:
    """Tell D rank ``sender`` why P rank ``p_rank`` refuses it (``leaving``: this rank fails next)."""
    with contextlib.suppress(PeerGone):
        notify(agent, sender, agreement.encode("refuse", p_rank=p_rank, message=problem))
        if leaving:
            linger(agent)      # so that it reaches the D rank before this agent goes


def p_agent(task: RankTask, p_rank: int) -> str:
    return f"mambaxfer-{task.settings.run_id}-P{p_rank}"


class Inbox:
    """Every notification this rank's agent received, kept until it is looked for: a message may
    come before this rank waits for it (a D rank's ``ready`` while P still welcomes another)."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.control: list[tuple[str, dict[str, Any]]] = []
        self.plain: Counter[tuple[str, bytes]] = Counter()   # (sender, message): how many came

    def poll(self) -> None:
        for sender, messages in self.agent.get_new_notifs().items():
            sender = sender.decode() if isinstance(sender, bytes) else sender
            for message in messages:
                control = agreement.decode(message)
                if control is None:
                    self.plain[sender, message] += 1
                elif control["kind"] != "ping":
                    self.control.append((sender, control))

    def find(self, sender: str, kind: str, **fields: Any) -> dict[str, Any] | None:
        for who, control in self.control:
            if who == sender and control["kind"] == kind and all(control.get(k) == v for k, v in fields.items()):
                return control
        return None

    def take(self, kind: str) -> list[tuple[str, dict[str, Any]]]:
        found = [(who, c) for who, c in self.control if c["kind"] == kind]
        self.control = [(who, c) for who, c in self.control if c["kind"] != kind]
        return found


class Peers:
    """The other side's ranks this rank knows (by rank: agent name), pinged while it waits. One
    that answered its last message (``finished``) may leave without its going being a failure."""

    def __init__(self, agent: Any, role: str, inbox: Inbox, when: str = "") -> None:
        self.agent, self.role, self.inbox, self.when = agent, role, inbox, when   # when: said of one gone
        self.names: dict[int, str] = {}
        self.finished: set[int] = set()
        self.last = time.monotonic()

    def tell(self, rank: int, message: bytes) -> None:
        try:
            notify(self.agent, self.names[rank], message)
        except PeerGone as exc:
            raise self.gone(rank, exc.nixl) from None

    def gone(self, rank: int, nixl: str = "") -> PeerGone:
        return PeerGone(f"{self.role}{rank} ({self.names[rank]}) went away{self.when}", nixl)

    def ping(self, last_word: Callable[[int], bool] = lambda rank: False) -> None:
        """Every PING_EVERY seconds at most; a peer gone is an error unless ``last_word(rank)``:
        its last message came in just before it left."""
        if time.monotonic() - self.last < PING_EVERY:
            return
        self.last = time.monotonic()
        for rank, name in self.names.items():
            if rank in self.finished:
                continue
            try:
                notify(self.agent, name, agreement.encode("ping"))
            except PeerGone as exc:
                self.inbox.poll()
                if last_word(rank):
                    self.finished.add(rank)
                    continue
                raise self.gone(rank, exc.nixl) from None


def wait_for(ch: Channel, inbox: Inbox, peers: Peers, pending: Callable[[], str | None],
           last_word: Callable[[int], bool] = lambda rank: False) -> None:
    """Until ``pending()`` (what is still awaited, said to the coordinator) is None; the peers
    pinged meanwhile."""
    while True:
        inbox.poll()
        what = pending()
        if what is None:
            return
        ch.check_stop()
        ch.waiting(what)
        peers.ping(last_word)
        time.sleep(WAIT_ROUND)


def ranks_text(role: str, ranks: Any) -> str:
    return ", ".join(f"{role}{r}" for r in sorted(ranks))


def greet(task: RankTask, ch: Channel, agent: Any, remotes: list[str], inbox: Inbox, peers: Peers,
          sources: Sequence[int], hello: bytes, welcome: Callable[[int, dict[str, Any]], None] = lambda p, c: None,
          loaded: Callable[[int], bool] = lambda p: True) -> None:
    """A D rank's start: each source P rank's agent loaded, sent ``hello``, and its welcome taken
    (``welcome``), until ``loaded(p)`` (its metadata holds what it registered); a refusal is a user error."""
    discovery, mine = task.settings.discovery, task.settings.geometry
    assert discovery is not None and mine is not None
    names = {p: p_agent(task, p) for p in sources}
    by_name = {name: p for p, name in names.items()}
    asked = {p: 0.0 for p in sources}
    welcomed: set[int] = set()
    done: set[int] = set()
    ch.phase("exchanging", "finding the P ranks")
    while len(done) < len(names):
        ch.check_stop()
        waiting = next(p for p in sources if p not in done)
        ch.waiting(f"P{waiting}'s registered memory in its metadata" if waiting in welcomed
                   else f"P{waiting}'s answer" if waiting in peers.names
                   else f"P{waiting}'s agent metadata from {discovery.where(waiting)}")
        for p, name in names.items():
            if p in peers.names:
                continue
            if agent.check_remote_metadata(name):
                ch.phase("exchanging", f"hello to P{p}")
                try:
                    notify(agent, name, hello)
                except PeerGone:   # metadata of an agent gone since (a stale etcd entry): ask again
                    agent.remove_remote_agent(name)
                    continue
                peers.names[p] = name
                remotes.append(name)
            elif time.monotonic() - asked[p] >= REQUEST_EVERY:
                discovery.request(agent, name, p)
                asked[p] = time.monotonic()
        inbox.poll()
        for sender, control in inbox.take("refuse"):
            if sender in by_name:
                raise RankFailure(f"P{by_name[sender]} refused this decode run: {control.get('message')}", user=True)
        for sender, control in inbox.take("welcome"):
            source = by_name.get(sender)
            if source is None or source in welcomed:
                continue
            problem = agreement.mismatch(control.get("geometry") or {}, mine)
            if problem is not None:
                raise RankFailure(f"P{source}: {problem}", user=True)
            welcome(source, control)
            welcomed.add(source)
        for p in sorted(welcomed - done):
            # The metadata loaded before P registered its memory may not hold it: ask until it does.
            if loaded(p):
                done.add(p)
            elif time.monotonic() - asked[p] >= REQUEST_EVERY:
                discovery.request(agent, names[p], p)
                asked[p] = time.monotonic()
        peers.ping()
        time.sleep(WAIT_ROUND)


def admit(task: RankTask, ch: Channel, agent: Any, remotes: list[str], inbox: Inbox, peers: Peers,
          targets: Sequence[int], refusal: Callable[[dict[str, Any]], str | None], verb: str,
          admitted: dict[int, dict[str, Any]], welcome: dict[str, Any] | None = None,
          loaded: Callable[[dict[str, Any]], tuple[Any, ...]] = lambda hello: (),
          busy: Callable[[], str | None] = lambda: None, last_word: Callable[[int], bool] = lambda rank: False) -> None:
    """A P rank's side of ``greet``: each D rank of ``targets`` welcomed into ``admitted`` once its metadata
    (``loaded``), geometry and ``refusal`` agree, then while ``busy()`` awaits; a refusal (but a twin's) ends it."""
    discovery, mine = task.settings.discovery, task.settings.geometry
    assert discovery is not None and mine is not None
    hellos: dict[str, tuple[dict[str, Any], float]] = {}   # sender -> (hello, when its metadata was asked)
    agreed: set[str] = set()                               # senders whose hello this rank accepted
    while True:
        missing = [d for d in targets if d not in admitted]
        what = f"the hello of {ranks_text('D', missing)}" if missing else busy()
        if what is None:
            return
        ch.check_stop()
        ch.waiting(what)
        inbox.poll()
        for sender, hello in inbox.take("hello"):
            if sender not in peers.names.values():
                hellos[sender] = (hello, 0.0)
        for sender, (hello, asked) in list(hellos.items()):
            d_rank = hello.get("d_rank")
            if sender not in agreed and agent.check_remote_metadata(sender):
                if d_rank in admitted:    # a second decode run
                    del hellos[sender]
                    refuse(agent, sender, task.rank, f"P{task.rank} already {verb} another D{d_rank}", False)
                    continue
                problem = agreement.mismatch(mine, hello.get("geometry") or {}) or refusal(hello)
                if problem is not None:
                    refuse(agent, sender, task.rank, problem, True)
                    raise RankFailure(f"refused D{d_rank} ({sender}): {problem}", user=True)
                agreed.add(sender)
            if sender in agreed and agent.check_remote_metadata(sender, *loaded(hello)):
                assert isinstance(d_rank, int)
                del hellos[sender]
                notify(agent, sender, agreement.encode("welcome", p_rank=task.rank, **(welcome or {}), geometry=mine))
                ch.phase("serving", f"welcomed D{d_rank}")
                remotes.append(sender)
                peers.names[d_rank] = sender
                admitted[d_rank] = hello
            elif time.monotonic() - asked >= REQUEST_EVERY:
                discovery.request(agent, sender, None)   # etcd; a direct D sent it to our listener
                hellos[sender] = (hello, time.monotonic())
        peers.ping(last_word)
        time.sleep(WAIT_ROUND)
