"""``execute --engine sglang``: SGLang's transfer performed for real (pure: no torch, no NIXL), in
memory laid out as SGLang's pools lay it out, checked byte by byte on D (docs/execute.md)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from mambaxfer_cli.engines.sglang.entries import TransferEntry
from mambaxfer_cli.engines.sglang.kv import (
    K, KV_BUFFERS, LATENT, KVRank, KVSide, buffers, exact_kv_writes, forced_page_size, kv_entries, sglang_kv_writes,
)
from mambaxfer_cli.engines.sglang.plan import Descriptor, SGLangPlan
from mambaxfer_cli.engines.sglang.writes import StateWrite, check_side
from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.execute.coordinator import Progress, run_ranks
from mambaxfer_cli.execute.results import Checked
from mambaxfer_cli.execute.side_channel import check_ports
from mambaxfer_cli.engines.sglang.transfer.results import SlotDecodeResult, SlotPrefillResult, WriteTiming
from mambaxfer_cli.execute.tasks import Memory, RankTask, RunSettings, available_memory, gib, unexecutable
from mambaxfer_cli.planning.layout import RankLayout
from mambaxfer_cli.proof.pattern import POISON

SCHEMA = "mambaxfer.sglang-execute/v1"
P_SLOTS, P_SLOT = 3, 1      # prefill: the request in the middle slot
D_SLOTS, D_SLOT = 4, 2      # decode: another slot than P's, and room past it
PAGE_SIZE = 4               # tokens per KV page (SGLang's --page-size): a page's tokens are real strides,
                            # unless SGLang sets the model's own (PAGE_SIZES: DSA's 64 · index_kpool, QSA's 64)
SLOTS = {"prefill": {"slots": P_SLOTS, "request": P_SLOT}, "decode": {"slots": D_SLOTS, "request": D_SLOT}}
MIN_ROUNDS = 3              # two poisons tell written from untouched; three patterns make a
                            # wrong byte that holds the right value by chance (1 in 2^24) negligible


def pattern_block(slot: int, round_: int) -> int:
    """The pattern's block of a P slot in a round: the request's slot changes every round, the
    slots around it keep round 0's."""
    return slot + P_SLOTS * round_ if slot == P_SLOT else slot


def poison(round_: int) -> int:
    """D's poison in a round: two values by turns, so that a byte no write reached holds each."""
    return POISON if round_ % 2 == 0 else POISON ^ 0xFF


@dataclass(frozen=True)
class SlotMemory(Memory):
    """One region per transfer entry: ``logical_blocks`` slots of that entry's item length."""

    item_lens: tuple[int, ...] = ()

    @property
    def region_shapes(self) -> tuple[tuple[int, int], ...]:
        return tuple((self.logical_blocks, n) for n in self.item_lens)


def slot_memory(entries: tuple[TransferEntry, ...], slots: int) -> SlotMemory:
    return SlotMemory(len(entries), slots, 0, item_lens=tuple(e.item_len for e in entries))


@dataclass(frozen=True)
class SlotTask(RankTask):
    """A rank of SGLang's transfer: its entries (their order is its regions'), its request slot."""

    entries: tuple[TransferEntry, ...] = ()
    slot: int = 0
    rounds: int = MIN_ROUNDS
    kv: KVRank | None = None           # the rank's KV page, where entries hold K and V buffers
    draft_kv: KVRank | None = None     # the draft's, for its entries (layer ids from draft_band on)
    draft_band: int = 0
    module: ClassVar[str] = ""         # its programs' module where not execute's (remote.py or rank.py)

    @property
    def program(self) -> str:
        module = self.module or ("remote" if self.settings.discovery else "rank")
        return f"mambaxfer_cli.engines.sglang.transfer.{module}:{'prefill' if self.role == 'P' else 'decode'}"


@dataclass(frozen=True)
class SlotPrefillTask(SlotTask):
    writes: tuple[tuple[int, tuple[Descriptor, ...]], ...] = ()   # (d_rank, its descriptors from here)
    decode_memory: SlotMemory = SlotMemory(0, 0, 0)               # what a D rank must publish


@dataclass(frozen=True)
class SlotDecodeTask(SlotTask):
    writers: tuple[int, ...] = ()      # the P ranks that write into this rank
    p_slot: int = P_SLOT               # where its bytes come from: the pattern's block


def chosen_writes(plan: SGLangPlan, semantics: str) -> SGLangPlan:
    """The plan with the writes ``semantics`` names: SGLang's own, or the exact ones."""
    if semantics == "sglang":
        if plan.verdict.refusal:
            raise Refused(f"SGLang refuses this pairing, so it writes nothing: {plan.verdict.refusal}")
        if plan.verdict.fails:
            raise Refused(f"{plan.verdict.sentence()}, so no state moves; --semantics exact moves the bytes")
        return plan
    if not plan.exact:
        raise unexecutable("the two sides keep the state in different dtypes, so no plain copy is exact")
    return replace(plan, writes=plan.exact)


@dataclass(frozen=True)
class Transfer:
    """What a run moves: each side's entries (the state's, then the KV buffers'), and the
    descriptors of one request into them."""

    prefill_entries: tuple[TransferEntry, ...]
    decode_entries: tuple[TransferEntry, ...]
    descriptors: tuple[Descriptor, ...]
    p_kv: KVSide | None = None
    d_kv: KVSide | None = None
    p_draft: KVSide | None = None       # the draft's KV pages, where they differ from the target's
    d_draft: KVSide | None = None

    @property
    def attention_layers(self) -> int:
        return sum(1 for e in self.decode_entries if e.field in (K, LATENT))


def kv_descriptors(writes: tuple[StateWrite, ...], p_entries: tuple[TransferEntry, ...],
                   d_entries: tuple[TransferEntry, ...], first: int) -> list[Descriptor]:
    """The KV writes of one page, for every K and V buffer (entries ``first`` on, alike on both
    sides), at the request's pages."""
    out = []
    for i in range(first, len(p_entries)):
        src, dst = p_entries[i], d_entries[i]
        out += [Descriptor(w.p_rank, w.d_rank, src.layer_id, i, src.item_len * P_SLOT + w.src, i,
                           dst.item_len * D_SLOT + w.dst, w.length) for w in writes if w.field == src.field]
    return out


def transfer(plan: SGLangPlan, attention: str | None) -> Transfer:
    """The state's writes of ``plan``, and the attention KV's (``attention``: SGLang's head slices,
    the exact heads, or None for the state alone)."""
    descriptors = list(plan.descriptors(P_SLOT, D_SLOT))
    if attention is None or not plan.model.has_attention:
        return Transfer(plan.prefill_entries, plan.decode_entries, tuple(descriptors))
    page = forced_page_size(plan.model) or PAGE_SIZE
    p_kv, d_kv = KVSide(plan.model, plan.p_tp, page), KVSide(plan.model, plan.d_tp, page)
    p_entries, d_entries = plan.prefill_entries + kv_entries(p_kv), plan.decode_entries + kv_entries(d_kv)

    def kv_writes(p: KVSide, d: KVSide) -> tuple[StateWrite, ...]:
        return sglang_kv_writes(p, d, plan.head_slices) if attention == "sglang" else exact_kv_writes(p, d)

    descriptors += kv_descriptors(kv_writes(p_kv, d_kv), p_entries, d_entries, len(plan.prefill_entries))
    p_draft = d_draft = None
    if plan.draft is not None:     # its own pages after the target's (plan refuses other heads across TP sizes)
        first = len(p_entries)
        p_draft, d_draft = plan.draft.side(plan.model, plan.p_tp, page), plan.draft.side(plan.model, plan.d_tp, page)
        p_entries += plan.draft.entries(plan.model, plan.p_tp, page)
        d_entries += plan.draft.entries(plan.model, plan.d_tp, page)
        descriptors += kv_descriptors(kv_writes(p_draft, d_draft), p_entries, d_entries, first)
    ordered = tuple(sorted(descriptors, key=lambda d: (d.d_rank, d.p_rank, d.src_entry)))
    return Transfer(p_entries, d_entries, ordered, p_kv, d_kv, p_draft, d_draft)


def _check_bounds(moved: Transfer) -> None:
    """Every descriptor inside the entry it names on both sides (NIXL refuses one outside)."""
    for d in moved.descriptors:
        for side, entries, index, offset, slots in (
                ("prefill", moved.prefill_entries, d.src_entry, d.src_offset, P_SLOTS),
                ("decode", moved.decode_entries, d.dst_entry, d.dst_offset, D_SLOTS)):
            size = entries[index].item_len * slots
            if offset < 0 or offset + d.length > size:
                raise unexecutable(f"P{d.p_rank} -> D{d.d_rank} layer {d.layer_id}: a write of {d.length} bytes "
                                    f"at {offset} reaches past the {side} entry ({size} bytes)")


def build_tasks(plan: SGLangPlan, settings: RunSettings, rounds: int,
                moved: Transfer | None = None) -> tuple[list[SlotPrefillTask], list[SlotDecodeTask]]:
    """Every rank's task for what ``moved`` moves (``transfer``; None: the plan's writes alone,
    ``chosen_writes``); raises UserError when they cannot be executed."""
    moved = moved or transfer(plan, None)
    descriptors = moved.descriptors
    _check_bounds(moved)
    p_memory, d_memory = slot_memory(moved.prefill_entries, P_SLOTS), slot_memory(moved.decode_entries, D_SLOTS)
    total = plan.p_tp * p_memory.total_bytes + plan.d_tp * d_memory.total_bytes
    free = available_memory()
    if settings.device == "cpu" and free is not None and total > free // 2:
        raise unexecutable(f"its pools need {gib(total)} of DRAM over {plan.p_tp + plan.d_tp} ranks, more than "
                            f"half of the {gib(free)} available; use fewer --layers")
    p_layouts = check_side(plan.model, plan.p_tp, plan.release).layouts()
    d_layouts = check_side(plan.model, plan.d_tp, plan.release).layouts()

    def draft_kv(side: KVSide | None, rank: int) -> dict[str, Any]:
        assert plan.draft is not None or side is None
        return {} if side is None or plan.draft is None else {"draft_kv": side.rank(rank),
                                                               "draft_band": plan.draft.band}

    prefill = []
    for p, layout in enumerate(p_layouts):
        mine = [x for x in descriptors if x.p_rank == p]
        targets = sorted({x.d_rank for x in mine})
        prefill.append(SlotPrefillTask(
            "P", p, settings, settings.dev(p), layout, p_memory, entries=moved.prefill_entries, slot=P_SLOT,
            rounds=rounds, kv=moved.p_kv.rank(p) if moved.p_kv else None, **draft_kv(moved.p_draft, p),
            writes=tuple((d, tuple(x for x in mine if x.d_rank == d)) for d in targets), decode_memory=d_memory))
    decode = [SlotDecodeTask("D", d, settings, settings.dev(plan.p_tp + d), layout, d_memory,
                             entries=moved.decode_entries, slot=D_SLOT, rounds=rounds,
                             kv=moved.d_kv.rank(d) if moved.d_kv else None, **draft_kv(moved.d_draft, d),
                             writers=tuple(sorted({x.p_rank for x in descriptors if x.d_rank == d})))
              for d, layout in enumerate(d_layouts)]
    return prefill, decode


@dataclass
class SlotOutcome(Checked):
    plan: SGLangPlan
    semantics: str
    settings: RunSettings
    rounds: int
    decode: list[SlotDecodeResult]
    prefill: list[SlotPrefillResult]
    phases: dict[str, float] = field(default_factory=dict)
    moved: Transfer | None = None      # None: the plan's state alone

    @property
    def bad_bytes(self) -> int:
        return sum(d.bad for d in self.decode)

    @property
    def predicted(self) -> int:
        """What ``check --engine sglang`` predicts for these writes: the verdict's bytes (the state's
        and each KV head's it lands wrong) for SGLang's, none for the exact ones."""
        if self.semantics != "sglang":
            return 0
        kv = self.moved.d_kv if self.moved else None
        heads = (self.plan.verdict.heads_wrong * kv.head_bytes * kv.page_size * 2 * self.moved.attention_layers
                 if kv and self.moved else 0)
        return self.plan.verdict.bad_bytes() + heads

    @property
    def attention(self) -> dict[str, Any] | None:
        """The attention KV moved: its layers, page size, heads per rank on each side and each
        buffer's page (D's item bytes)."""
        moved = self.moved
        if moved is None or moved.p_kv is None or moved.d_kv is None:
            return None
        return {"layers": moved.attention_layers, "draft_layers": self.plan.draft.layers if self.plan.draft else 0,
                "page_size": moved.d_kv.page_size,
                "head_bytes": moved.d_kv.head_bytes, "dtype": self.plan.model.model_dtype,
                "heads_per_rank": {"prefill": moved.p_kv.heads, "decode": moved.d_kv.heads},
                "buffers": {f: moved.d_kv.item_bytes(f) for f in buffers(self.plan.model)}}

    def into(self, d_rank: int) -> list[tuple[int, WriteTiming]]:
        """The WRITEs into one D rank: (P rank, timing)."""
        return [(p.p_rank, w) for p in self.prefill for w in p.writes if w.d_rank == d_rank]

    @property
    def total_bytes(self) -> int:
        return sum(w.bytes for p in self.prefill for w in p.writes)

    def to_dict(self) -> dict[str, Any]:
        plan, s = self.plan, self.settings
        decode = []
        for d in self.decode:
            into = self.into(d.d_rank)
            moved, seconds = sum(w.bytes for _, w in into), max((w.time_s for _, w in into), default=0.0)
            decode.append({**d.to_dict(), "bytes": moved,
                           "descriptors": sum(w.descriptors for _, w in into),
                           "descriptors_merged": sum(w.descriptors_merged for _, w in into),
                           "time_s": seconds, "gb_per_s": moved / seconds / 1e9 if seconds > 0 else 0.0})
        return {"schema": SCHEMA, "engine": "sglang", "release": plan.release.version, "model": plan.model.name,
                "p_tp": plan.p_tp, "d_tp": plan.d_tp, "backend": plan.backend, "semantics": self.semantics,
                "device": s.device, "memory": s.mem_type, "rounds": self.rounds,
                "slots": SLOTS,
                "ssm_layers": plan.verdict.ssm_layers, "attention": self.attention, "verified": self.verified,
                "bad_bytes": self.bad_bytes,
                "predicted_bad_bytes": self.predicted, "total_bytes": self.total_bytes, "phases_s": self.phases,
                "decode": decode, "prefill": [p.to_dict() for p in self.prefill]}


def run_tasks(plan: SGLangPlan, semantics: str,
              settings: RunSettings) -> tuple[int, Transfer, list[SlotPrefillTask], list[SlotDecodeTask]]:
    """A run's rounds, what it moves and every rank's task; raises UserError."""
    if settings.iters < 1:
        raise UserError("--iters must be >= 1")
    rounds = max(settings.iters, MIN_ROUNDS)
    chosen = chosen_writes(plan, semantics)
    moved = transfer(chosen, semantics)
    return (rounds, moved, *build_tasks(chosen, settings, rounds, moved))


def execute(plan: SGLangPlan, semantics: str, settings: RunSettings, timeout: float,
            progress: Progress | None = None) -> SlotOutcome:
    """Run the plan's writes (``semantics``: sglang or exact) with real NIXL WRITEs; raises
    UserError (exit 2) or RunFailure (exit 3)."""
    rounds, moved, prefill, decode = run_tasks(plan, semantics, settings)
    check_ports(settings, len(decode), role="D")
    finished = run_ranks([*decode, *prefill], settings.run_id, timeout, progress)
    results = finished.results
    return SlotOutcome(plan, semantics, settings, rounds,
                       decode=[r for t in decode if isinstance(r := results[t.name], SlotDecodeResult)],
                       prefill=[r for t in prefill if isinstance(r := results[t.name], SlotPrefillResult)],
                       phases=finished.phases, moved=moved)


def holds(layout: RankLayout, field_name: str, offset: int, kv: KVRank | None = None, outer: int = 1) -> str:
    """What a byte of an item holds: its region, unit and byte (a KV page's: buffer, token, head
    and byte); ``outer``: the conv rows before its channels (Kimi's)."""
    if kv is not None and field_name in KV_BUFFERS:
        return kv.holds(field_name, offset)
    if field_name not in ("conv", "temporal"):
        return f"{field_name} byte {offset}"
    if field_name == "conv" and outer > 1:       # (row, channel, byte) to (channel, row, byte)
        e = layout.regions[0].unit_bytes // outer
        row, rest = divmod(offset, layout.conv_bytes // outer)
        offset = rest // e * outer * e + row * e + rest % e
    kind, base = ("conv", 0) if field_name == "conv" else ("ssm", layout.conv_bytes)
    for region in layout.regions:
        start = region.offset - base
        if region.kind == kind and start <= offset < start + region.size:
            unit, byte = divmod(offset - start, region.unit_bytes)
            return f"{region.name} {region.unit} {region.shard.start + unit} byte {byte}"
    return "padding"
