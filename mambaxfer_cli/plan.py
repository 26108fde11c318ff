"""A P/D plan: both sides' layouts, the reads, the descriptor-ID map and warnings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


from mambaxfer_cli.descriptors import (
    ATTENTION_HEAD_BYTES, DescriptorList, DescriptorMap, DescriptorRead, Engine, Request, block_ids,
    make_engine, parse_blocks, random_request,
)
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.kv_groups import KVGrouping, vllm_grouping
from mambaxfer_cli.layout import RankLayout, Shard, engine_layouts, kv_head_shard
from mambaxfer_cli.model import ModelSpec
from mambaxfer_cli.reads import (
    EXACT, SEMANTICS, VLLM, Read, coalesce, kv_sources, misreads, plan_reads, tp_ratio, vllm_reads,
)

SCHEMA = "mambaxfer.plan/v1"


@dataclass(frozen=True)
class EngineOptions:
    num_blocks: int = 100_000
    blocks_per_logical: int = 4


@dataclass(frozen=True)
class PlanOptions:
    semantics: str = EXACT
    coalesce: bool = False
    prefill: EngineOptions = EngineOptions()
    decode: EngineOptions = EngineOptions()
    attention_streams: int = 1          # per KV-cache tensor: 1 in vLLM 0.33, 2 when K and V split
    grouping: KVGrouping | None = None  # None: vLLM 0.33's rule over the model's layers
    request_blocks: int = 1             # logical blocks per group in a generated request
    prefill_blocks: str | None = None
    decode_blocks: str | None = None
    seed: int = 0


@dataclass(frozen=True)
class Warning_:
    code: str
    message: str

    def to_dict(self) -> dict:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class Side:
    tp: int
    ranks: tuple[RankLayout, ...]

    def to_dict(self, only: int | None = None) -> dict:
        return {"tp": self.tp, "ranks": [r.to_dict() for r in self.ranks if only is None or r.rank == only]}


@dataclass(frozen=True)
class Plan:
    model: ModelSpec
    semantics: str
    tp_ratio: int | None
    prefill: Side
    decode: Side
    reads: tuple[Read, ...]
    descriptors: DescriptorMap
    warnings: tuple[Warning_, ...]
    grouping: KVGrouping
    uncoalesced_reads: tuple[Read, ...] = field(default=(), compare=False)

    @property
    def page_bytes(self) -> tuple[int, int]:
        return page_bytes(self.prefill.ranks[0]), page_bytes(self.decode.ranks[0])

    def to_dict(self, d_rank: int | None = None) -> dict:
        if d_rank is not None and not 0 <= d_rank < self.decode.tp:
            raise UserError(f"--d-rank {d_rank} is not a D rank (D TP is {self.decode.tp}: ranks 0..{self.decode.tp - 1})")
        return {
            "schema": SCHEMA,
            "model": self.model.to_dict(),
            "semantics": self.semantics,
            "tp_ratio": self.tp_ratio,
            "prefill": self.prefill.to_dict(),
            "decode": self.decode.to_dict(d_rank),
            "reads": [r.to_dict() for r in self.reads if d_rank is None or r.d_rank == d_rank],
            "descriptors": self.descriptors.to_dict(d_rank),
            "warnings": [w.to_dict() for w in self.warnings],
        }


def page_bytes(layout: RankLayout) -> int:
    """Page of one logical block: the state, padded to 256 bytes (as engines align pages)."""
    return -(-layout.state_bytes // 256) * 256


def attention_slot_bytes(model: ModelSpec, tp: int) -> int:
    shard = kv_head_shard(model, tp, 0)
    return ATTENTION_HEAD_BYTES * (len(shard) if shard else 1)


def _misread_warning(plan_reads_: Sequence[Read], prefill, decode, code: str, lead: str) -> list[Warning_]:
    bad = misreads(plan_reads_, prefill, decode)
    if not bad:
        return []
    shown = "; ".join(map(str, bad[:4]))
    more = f"; and {len(bad) - 4} more" if len(bad) > 4 else ""
    return [Warning_(code, f"{lead}: {shown}{more}")]


def _descriptor_reads(model: ModelSpec, reads: Sequence[Read], prefill: Side, decode: Side,
                      p_engine: Engine, d_engine: Engine, groups: Sequence[str], request: Request) -> list[DescriptorRead]:
    has_attention = "attention" in groups
    p_kv = [kv_head_shard(model, prefill.tp, r) for r in range(prefill.tp)] if has_attention else []
    p_slot = attention_slot_bytes(model, prefill.tp) if has_attention else ATTENTION_HEAD_BYTES
    d_slot = attention_slot_bytes(model, decode.tp) if has_attention else ATTENTION_HEAD_BYTES
    out = []
    for d in decode.ranks:
        ssm = {r.p_rank: r for r in reads if r.d_rank == d.rank}
        attn: dict[int, Shard] = {}
        d_kv = None
        if has_attention:
            d_kv = kv_head_shard(model, decode.tp, d.rank)
            attn = dict(kv_sources(p_kv, d_kv))
        whole = tuple((r.offset, r.size) for r in d.regions)
        for i, p_rank in enumerate(sorted(set(ssm) | set(attn))):
            segs = ssm[p_rank].segments if p_rank in ssm else ()
            local_attn, remote_attn = (0, d_slot), (0, p_slot)
            if p_rank in attn:
                units, hb = attn[p_rank], ATTENTION_HEAD_BYTES
                local_attn = ((units.start - d_kv.start) * hb, len(units) * hb)
                remote_attn = ((units.start - p_kv[p_rank].start) * hb, len(units) * hb)
            local_regions = tuple((s.local_offset, s.size) for s in segs)
            is_base = local_regions == whole and local_attn == (0, d_slot)
            local = DescriptorList(d_engine, local_regions, local_attn)
            remote = DescriptorList(p_engine, tuple((s.remote_offset, s.size) for s in segs), remote_attn)
            with_attn = p_rank in attn
            out.append(DescriptorRead(
                d.rank, p_rank, "base" if is_base else f"split:{i}", local, remote,
                local_ids=block_ids(local, groups, request.decode_blocks, with_attn),
                remote_ids=block_ids(remote, groups, request.prefill_blocks, with_attn),
                attention=with_attn))
    return out


def build_plan(model: ModelSpec, p_tp: int, d_tp: int, options: PlanOptions = PlanOptions()) -> Plan:
    """Plan every read of a P/D pairing, under exact or vLLM 0.33 semantics."""
    if options.semantics not in SEMANTICS:
        raise UserError(f"unknown semantics '{options.semantics}'; choose one of: {', '.join(SEMANTICS)}")
    prefill = Side(p_tp, engine_layouts(model, p_tp))
    decode = Side(d_tp, engine_layouts(model, d_tp))
    raw = plan_reads(prefill.ranks, decode.ranks, options.semantics)
    reads = coalesce(raw) if options.coalesce else raw

    warnings: list[Warning_] = []
    ratio = tp_ratio(p_tp, d_tp)
    if options.semantics == VLLM:
        warnings += _misread_warning(
            raw, prefill.ranks, decode.ranks, "vllm-replicated-groups",
            "vLLM 0.33's offsets assume every region is evenly sharded, but B/C groups are replicated "
            "here, so these reads corrupt the state (use --semantics exact)")
    elif ratio is None:
        warnings.append(Warning_("vllm-unsupported-pairing",
                                 f"vLLM 0.33 refuses P TP {p_tp} / D TP {d_tp} (neither divides the other); "
                                 f"this plan is mambaxfer's exact plan"))
    else:
        try:
            theirs = vllm_reads(prefill.ranks, decode.ranks)
        except UserError as exc:   # vLLM's own layout check refuses it: the exact plan still stands
            warnings.append(Warning_("vllm-unsupported-pairing",
                                     f"vLLM 0.33 refuses P TP {p_tp} / D TP {d_tp} ({exc}); "
                                     f"this plan is mambaxfer's exact plan"))
        else:
            warnings += _misread_warning(theirs, prefill.ranks, decode.ranks, "vllm-differs",
                                         "vLLM 0.33 would read wrong bytes for this pairing")

    grouping = options.grouping or vllm_grouping(model.layers)
    k = len(decode.ranks[0].regions)
    p_engine = make_engine(grouping, options.prefill.num_blocks, options.prefill.blocks_per_logical,
                           options.attention_streams, k)
    d_engine = make_engine(grouping, options.decode.num_blocks, options.decode.blocks_per_logical,
                           options.attention_streams, k)
    if grouping.has_attention and options.prefill.blocks_per_logical != options.decode.blocks_per_logical:
        raise UserError(
            f"attention groups need the same kernel blocks per logical block on both sides "
            f"(P {options.prefill.blocks_per_logical}, D {options.decode.blocks_per_logical}): "
            f"the local and remote ID lists would differ in length")
    n_groups = len(grouping.groups)
    request = random_request(n_groups, options.request_blocks, p_engine, d_engine, options.seed)
    if options.prefill_blocks is not None:
        request = Request(parse_blocks(options.prefill_blocks, n_groups, p_engine, "prefill"), request.decode_blocks)
    if options.decode_blocks is not None:
        request = Request(request.prefill_blocks, parse_blocks(options.decode_blocks, n_groups, d_engine, "decode"))
    if any(len(p) != len(d) for p, d in zip(request.prefill_blocks, request.decode_blocks)):
        raise UserError("--prefill-blocks and --decode-blocks must give the same number of blocks per group")
    dreads = _descriptor_reads(model, reads, prefill, decode, p_engine, d_engine, grouping.groups, request)
    descriptors = DescriptorMap(grouping.groups, p_engine, d_engine, request, tuple(dreads))
    return Plan(model, options.semantics, ratio, prefill, decode, reads, descriptors, tuple(warnings),
                grouping, uncoalesced_reads=raw)
