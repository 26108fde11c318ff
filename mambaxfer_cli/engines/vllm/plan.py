"""A P/D plan: both sides' layouts, the reads, the descriptor-ID map and warnings."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Sequence

from mambaxfer_cli.engines.vllm.attention import (
    AttentionRead, attention_read, head_sources, no_attention_read, whole_block,
)
from mambaxfer_cli.engines.vllm.descriptors import (
    DescriptorList, DescriptorMap, DescriptorRead, ListShape, Request, block_ids, integers, kernel_blocks, parse_blocks,
    random_request,
)
from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.engines.vllm.engine import Engines, EngineLayout, covered, engine_layout
from mambaxfer_cli.engines.vllm.geometry import EngineFlags
from mambaxfer_cli.engines.vllm.handshake import (
    Refusal, Verdict, handshake_verdict, not_started_first, split_remote_blocks, with_block_size,
)
from mambaxfer_cli.engines.vllm.startup import mla_dtype_refusal
from mambaxfer_cli.engines.vllm.kv_groups import PLE, RING, KVGrouping, model_grouping
from mambaxfer_cli.planning.layout import RankLayout
from mambaxfer_cli.planning.model import ATTENTION, SSM, ModelSpec
from mambaxfer_cli.planning.reads import Read, coalesce, misreads, tp_ratio
from mambaxfer_cli.engines.vllm.reads import EXACT, SEMANTICS, VLLM, plan_reads, vllm_length_mismatches, vllm_reads
from mambaxfer_cli.engines.vllm.release import EngineFacts
from mambaxfer_cli.engines.vllm import drafts, families, indexer_caches
from mambaxfer_cli.engines.vllm.kv_layout import (
    CONNECTOR_LAYOUT, contiguous_layout, heads_refusal, layout_error, resolved_layout,
)


SCHEMA = "mambaxfer.plan/v1"


@dataclass(frozen=True)
class PlanOptions:
    semantics: str = EXACT
    coalesce: bool = False
    prefill: EngineFlags = EngineFlags()
    decode: EngineFlags = EngineFlags()
    attention_streams: int = 1          # per KV-cache tensor: 1 in vLLM, 2 when K and V split
    grouping: KVGrouping | None = None  # None: vLLM's rule over the model's layers
    request_blocks: int = 1             # D logical blocks per group in a generated request
    prefill_blocks: str | None = None
    decode_blocks: str | None = None
    seed: int = 0
    prefill_model: ModelSpec | None = None   # P's model when its dtypes or num_spec differ from D's
    kv_cache_layout: str | None = None       # VLLM_KV_CACHE_LAYOUT on both engines (None: vLLM's pick)
    drafted: bool | None = None              # speculative tokens drafted by a model (None: not said)
    drafter: str | None = None               # the EAGLE drafter --speculative-config names

    @property
    def engines(self) -> Engines:
        return Engines(self.prefill, self.decode)


# A plan's warning has a refusal's shape: a code and its words ({"code", "message"} in JSON).
Warning_ = Refusal


@dataclass(frozen=True)
class Plan:
    model: ModelSpec
    semantics: str
    tp_ratio: int | None
    prefill: EngineLayout
    decode: EngineLayout
    reads: tuple[Read, ...]
    descriptors: DescriptorMap
    warnings: tuple[Warning_, ...]
    grouping: KVGrouping
    verdict: Verdict = field(default=Verdict(()), compare=False)
    uncoalesced_reads: tuple[Read, ...] = field(default=(), compare=False)
    prefill_model: ModelSpec | None = field(default=None, compare=False)   # P's, where it differs from D's
    # the lists execute posts and check proves where ``descriptors`` numbers vLLM's regions apart
    # from mambaxfer's KV-cache tensors (GLM-5-Next under vLLM semantics); None: ``descriptors``
    moved: DescriptorMap | None = field(default=None, compare=False)
    # where P and D group a drafter's layers otherwise, the engines vLLM's handshake meets: each with the
    # drafter as its TP size's ranks group it (the plan's own engines leave it out); None elsewhere
    met: tuple[EngineLayout, EngineLayout] | None = field(default=None, compare=False)

    @property
    def draft_groups(self) -> bool:
        """Whether P and D group a drafter's layers otherwise (vLLM's ``draft-groups`` refusal)."""
        return self.met is not None

    @property
    def served(self) -> tuple[EngineLayout, EngineLayout]:
        """The engines vLLM builds of the pairing (``met`` where the plan's own leave a drafter out)."""
        return self.met or (self.prefill, self.decode)

    @property
    def moved_descriptors(self) -> DescriptorMap:
        """The descriptor map execute posts and check proves: vLLM's reads on mambaxfer's KV-cache
        tensors; ``descriptors`` except where vLLM numbers other regions (the same pages)."""
        return self.moved or self.descriptors

    @property
    def page_bytes(self) -> tuple[int, int]:
        return self.prefill.page_bytes, self.decode.page_bytes

    @property
    def engines(self) -> Engines:
        return Engines(self.prefill.flags, self.decode.flags)

    @property
    def releases(self) -> str:
        """How answers name the release(s): ``vLLM 0.34``, or ``vLLM 0.33 (P) / 0.34 (D)``."""
        return self.engines.releases

    @property
    def received_sub_blocks(self) -> int:
        """How many of P's kernel blocks vLLM reads into one of D's (``block_size_ratio``) before
        ``kv_postprocess_blksize_on_receive`` orders their tokens; 1 where not split so."""
        kd, kp = self.decode.kernel_tokens, self.prefill.kernel_tokens
        if self.semantics != VLLM or not self.decode.has_attention or kd == kp or kd % kp:
            return 1
        return kd // kp

    def to_dict(self, d_rank: int | None = None) -> dict[str, Any]:
        if d_rank is not None and not 0 <= d_rank < self.decode.tp:
            raise UserError(f"--d-rank {d_rank} is not a D rank (D TP is {self.decode.tp}: "
                            f"ranks 0..{self.decode.tp - 1})")
        return {
            "schema": SCHEMA,
            "model": self.model.to_dict(),
            "semantics": self.semantics,
            **self.engines.to_dict(),
            "tp_ratio": self.tp_ratio,
            "engines": {"prefill": self.prefill.geometry.to_dict(), "decode": self.decode.geometry.to_dict()},
            "vllm": self.verdict.to_dict(),
            "prefill": self.prefill.to_dict(),
            "decode": self.decode.to_dict(d_rank),
            "reads": [r.to_dict() for r in self.reads if d_rank is None or r.d_rank == d_rank],
            "descriptors": self.descriptors.to_dict(d_rank),
            "warnings": [w.to_dict() for w in self.warnings],
        }


def _misread_warning(plan_reads_: Sequence[Read], prefill: Sequence[RankLayout], decode: Sequence[RankLayout],
                     code: str, lead: str) -> list[Warning_]:
    bad = misreads(plan_reads_, prefill, decode)
    if not bad:
        return []
    shown = "; ".join(map(str, bad[:4]))
    more = f"; and {len(bad) - 4} more" if len(bad) > 4 else ""
    return [Warning_(code, f"{lead}: {shown}{more}")]


def _request_tokens(groups: Sequence[str], d_counts: Sequence[int], scales: Sequence[Fraction], b_d: int) -> int:
    """The tokens of a request of ``d_counts`` D blocks per group: the target's attention blocks', or
    where the model keeps none (its layers cut), a drafter's blocks of other pages hold them."""
    target = [n for k, n, s in zip(groups, d_counts, scales) if k == ATTENTION and s == 1]
    return b_d * max(target) if target else max((math.floor(n * b_d / s) for k, n, s in zip(groups, d_counts, scales)
                                                  if k == ATTENTION), default=b_d)


def _request(options: PlanOptions, groups: Sequence[str], prefill: EngineLayout, decode: EngineLayout,
             scales: Sequence[Fraction]) -> Request:
    """Logical blocks per group: SSM groups one page per block on both sides; attention groups
    ``request_blocks`` D blocks (times ``scales``, rounded up) and the P blocks holding their tokens."""
    b_p, b_d = prefill.geometry.block_size, decode.geometry.block_size

    def p_counts(d_counts: Sequence[int]) -> list[int]:
        """P's blocks per group: an attention group's hold its D blocks' tokens (a drafter's of other
        pages, the target's tokens in blocks 1/scale the target's); any other group's, one a D block."""
        tokens = _request_tokens(groups, d_counts, scales, b_d)
        return [(-(-n * b_d // b_p) if s == 1 else math.ceil(tokens * s / b_p)) if k == ATTENTION else n
                for k, n, s in zip(groups, d_counts, scales)]

    if options.request_blocks < 1:
        raise UserError("--request-blocks must be >= 1")
    # a tail ring is one block per request, whatever its length
    d_counts = [1 if kind == RING else math.ceil(options.request_blocks * scale) for kind, scale in zip(groups, scales)]
    request = random_request(p_counts(d_counts), d_counts, prefill.lists, decode.lists, options.seed)
    p_blocks, d_blocks = request.prefill_blocks, request.decode_blocks
    if options.decode_blocks is not None:
        d_blocks = parse_blocks(options.decode_blocks, len(groups), decode.lists, "decode")
    needed = p_counts([len(d) for d in d_blocks])
    if options.prefill_blocks is not None:
        p_blocks = parse_blocks(options.prefill_blocks, len(groups), prefill.lists, "prefill")
    elif options.decode_blocks is not None:
        p_blocks = random_request(needed, [0] * len(groups), prefill.lists, decode.lists, options.seed).prefill_blocks
    for kind, p, d, count, scale in zip(groups, p_blocks, d_blocks, needed, scales):
        if len(p) != count:
            what = (f"{len(d)} D blocks of {int(b_d / scale)} tokens need {count} P blocks of {int(b_p / scale)} "
                    f"tokens" if kind == ATTENTION else f"{'a ring' if kind == RING else 'an SSM'} group needs as "
                    f"many P blocks as D blocks ({len(d)})")
            raise UserError(f"--prefill-blocks and --decode-blocks do not pair: {what}, got {len(p)}")
    return Request(tuple(p_blocks), tuple(d_blocks))


def _descriptor_reads(reads: Sequence[Read], prefill: EngineLayout, decode: EngineLayout, groups: Sequence[str],
                      request: Request, semantics: str, group_tensors: Sequence[int], scales: Sequence[Fraction],
                      numbered: Numbering | None = None) -> list[DescriptorRead]:
    """Each D rank's reads as descriptor lists and IDs: on mambaxfer's lists (the KV-cache tensors,
    what execute moves), or on vLLM's ``numbered`` regions where they are not those tensors;
    ``scales``: each group's blocks per target attention block (a drafter's page over the target's)."""
    has_attention = ATTENTION in groups and decode.has_attention
    b_d = decode.geometry.block_size
    p_bpl, d_bpl = prefill.geometry.blocks_per_logical, decode.geometry.blocks_per_logical
    p_shape, d_shape = (numbered.prefill, numbered.decode) if numbered else (prefill.lists, decode.lists)
    streams = numbered.group_streams if numbered else None
    last_token = decode.release.needs_remote_num_tokens(prefill.kernel_tokens, p_bpl, decode.kernel_tokens, d_bpl)
    tokens = _request_tokens(groups, [len(d) for d in request.decode_blocks], scales, b_d)
    out = []
    for d in decode.ranks:
        ssm = {r.p_rank: r for r in reads if r.d_rank == d.rank}
        attn = head_sources(prefill, decode, d.rank, set(ssm), semantics) if has_attention else {}
        whole = tuple((r.offset, r.size) for r in d.regions)
        for i, p_rank in enumerate(sorted(set(ssm) | set(attn))):
            segs = ssm[p_rank].segments if p_rank in ssm else ()
            how: AttentionRead | None = (attention_read(prefill, decode, d.rank, p_rank, attn[p_rank], semantics)
                                         if p_rank in attn else None)
            local_attn = how.local if how else no_attention_read(prefill, decode, semantics)
            remote_attn = how.remote if how else whole_block(prefill)
            local_regions = tuple((s.local_offset, s.size) for s in segs)
            is_base = local_regions == whole and local_attn == whole_block(decode)
            local = DescriptorList(d_shape, local_regions, local_attn)
            remote = DescriptorList(p_shape, tuple((s.remote_offset, s.size) for s in segs), remote_attn)
            pairs: list[tuple[list[int] | None, list[int] | None]] = []
            for kind, pb, db, scale in zip(groups, request.prefill_blocks, request.decode_blocks, scales):
                if kind == PLE:     # its page, from each SSM source: in vLLM's numbering only
                    use = numbered is not None and p_rank in ssm
                    pairs.append((integers(db), integers(pb)) if use else (None, None))
                # a ring group's pages are the indexer's: in vLLM's numbering only
                elif kind == SSM or how is None or (kind == RING and numbered is None):
                    pairs.append((None, None))
                elif kind == RING:    # its one block per request, whole: the first piece of each side's kernel block
                    pairs.append(_ring_slots(db, pb, len(local_attn), len(remote_attn), d_bpl, p_bpl,
                                             numbered.ring_tokens if numbered else 0, tokens, last_token))
                else:   # a drafter's group of other pages: its kernel blocks hold 1/scale of the target's tokens
                    held = len(db) * b_d if scale == 1 or not last_token else math.ceil(tokens * scale)
                    pairs.append(how.slots(kernel_blocks(db, d_bpl), kernel_blocks(pb, p_bpl), held))
            local_slots, remote_slots = [pair[0] for pair in pairs], [pair[1] for pair in pairs]
            spt = d_shape.streams_per_tensor
            counts = tuple(tensors * local.k * len(db) if kind == SSM
                           else 0 if slots is None else len(slots) if kind == PLE
                           else len(slots) * (len(streams[g] or ()) if streams else tensors * spt)
                           for g, (kind, slots, db, tensors)
                           in enumerate(zip(groups, local_slots, request.decode_blocks, group_tensors)))
            out.append(DescriptorRead(
                d.rank, p_rank, "base" if is_base else f"split:{i}", local, remote,
                local_ids=block_ids(local, groups, request.decode_blocks, local_slots, group_tensors, streams),
                remote_ids=block_ids(remote, groups, request.prefill_blocks, remote_slots, group_tensors, streams),
                attention=how is not None, group_counts=counts))
    return out


def _ring_slots(db: Sequence[int], pb: Sequence[int], n_local: int, n_remote: int, d_bpl: int, p_bpl: int,
                ring: int, tokens: int, last_token: bool) -> tuple[list[int], list[int]]:
    """A ring block's paired slots: the first piece of each side's kernel block, or, paired from the
    last token (``_pair_blocks_by_last_token``), D's pieces up to it, paired from the end."""
    local = [b * n_local + j for b in kernel_blocks(db, d_bpl) for j in range(n_local if last_token else 1)]
    remote = [b * n_remote for b in kernel_blocks(pb, p_bpl)]
    if not last_token:
        return local, remote
    per = d_bpl * n_local
    pieces = -(-tokens // max(ring // per, 1))
    local, remote = local[:len(local) - -pieces % per], remote[:len(remote) - -pieces % p_bpl]
    pairs = min(len(local), len(remote))
    return local[len(local) - pairs:], remote[len(remote) - pairs:]


@dataclass(frozen=True)
class Numbering:
    """vLLM's descriptor lists where its NIXL regions are not mambaxfer's KV-cache tensors: both
    sides' list shapes over those regions and the regions each attention-kind group's IDs cover."""

    prefill: ListShape
    decode: ListShape
    group_streams: tuple[tuple[int, ...] | None, ...]
    ring_tokens: int = 0        # D's ring (tokens): how vLLM pairs its pieces across kernel blocks


def _numbering(model: ModelSpec, grouping: KVGrouping, prefill: EngineLayout, decode: EngineLayout,
               semantics: str) -> Numbering | None:
    """vLLM's numbering of a pairing's regions under vLLM semantics, where a family models them
    (D's release decides which regions a group covers: D builds both lists of a pull); else None."""
    if not decode.regions or semantics != VLLM or RING not in grouping.groups:
        return None
    every = decode.release.every_region     # 0.33: a group's IDs cover every region
    streams = tuple(None if kind in (SSM, PLE) else covered(decode.regions, kind == RING, every)
                    for kind in grouping.groups)
    found = indexer_caches.caches(model)
    return Numbering(replace(prefill.lists, regions=len(prefill.regions)),
                     replace(decode.lists, regions=len(decode.regions)), streams, found.ring_tokens if found else 0)


def _layout_refusal(prefill: EngineLayout, decode: EngineLayout) -> tuple[Refusal, ...]:
    """vLLM's own SSM layout check (a region it cannot split evenly), when it refuses."""
    if tp_ratio(prefill.tp, decode.tp) is None:
        return ()
    try:
        vllm_reads(prefill.ranks, decode.ranks)
    except UserError as exc:
        return (Refusal("layout", str(exc)),)
    return ()


def _with_kv_layout(verdict: Verdict, model: ModelSpec, p_tp: int, d_tp: int, requested: str | None) -> Verdict:
    """The verdict with a head split in a layout that keeps a block's heads apart (``requested``:
    VLLM_KV_CACHE_LAYOUT); a layout the model's backends cannot run stops both engines: refused."""
    said = layout_error(model, requested)
    if said is not None:
        raise Refused(f"vLLM does not start an engine of {model.name}: {said}")
    heads = heads_refusal(model, d_tp, p_tp, resolved_layout(model, requested))
    if heads is None or any(r.code == "tp-sizes" for r in verdict.refusals):    # met only past the TP sizes
        return verdict
    return replace(verdict, refusals=(*verdict.refusals, heads), suggested_layout=contiguous_layout(model))


def _prefill_model(model: ModelSpec, prefill: ModelSpec | None) -> ModelSpec:
    """P's model: D's unless given. It may differ in what vLLM's handshake does not compare (SSM
    dtypes, num_spec), never in shape: pages are patterned from D's dimensions on both sides."""
    if prefill is None:
        return model
    same = ("variant", "params", "conv_kernel", "num_kv_heads", "head_size")
    differs = [key for key in same if getattr(prefill, key) != getattr(model, key)]
    # the target's layers: a drafter on one side only is the compatibility hash's to refuse
    if drafts.target_only(prefill).layers != drafts.target_only(model).layers:
        differs.insert(1, "layers")
    if differs:
        raise UserError(f"P's model differs from D's in {', '.join(differs)}: no transfer between them can be planned")
    return prefill


def _length_warning(prefill: EngineLayout, decode: EngineLayout, differs: list[str], releases: str) -> list[Warning_]:
    """vLLM's descriptor pairs of unequal length: NIXL refuses every READ of the pairing."""
    bad = vllm_length_mismatches(prefill.ranks, decode.ranks)
    if not bad:
        return []
    why = f" (P's state differs from D's in {' and '.join(differs)})" if differs else ""
    return [Warning_("vllm-length-mismatch", (
        f"{releases}'s reads fail for this pairing: P's temporal state per rank is {bad[0].remote_bytes} bytes"
        f"{why}, and D reads it into a {bad[0].local_bytes}-byte slice of its own ({bad[0]}; {len(bad)} "
        f"such pairs); NIXL refuses descriptors of unequal length (makeXferReq: length mismatch), so "
        f"every transfer fails"))]


def _indexer_notes(model: ModelSpec, p_model: ModelSpec, prefill: EngineLayout, decode: EngineLayout,
                   verdict: Verdict, releases: str, semantics: str) -> list[Warning_]:
    """What this plan's reads leave out: the sparse-attention indexer's ring and compressed keys
    (Qwen4Exp's QSA, GLM-5-Next's kpool indexer); and a ring vLLM reads as head-sharded."""
    found = indexer_caches.caches(model)
    if found is None:
        return []
    out = [Warning_(found.warning, (
        f"{found.indexer}: each of the {model.attention_layers} {found.layer_kind} layers also keeps a "
        f"{found.ring_name} ({found.ring_tokens} tokens, a {found.ring_page_bytes} B page, one block per request) "
        f"and compressed keys (1 per {found.tokens_per_key} tokens, "
        f"{found.key_page_bytes(decode.geometry.block_size)} B per D block), the same on every rank; each D rank "
        f"reads both whole from its attention source P rank; not in the reads above (check proves them)"))]
    theirs = indexer_caches.caches(p_model)
    if verdict.accepts and theirs is not None and theirs.key_bytes != found.key_bytes:
        out.append(Warning_("vllm-indexer-key-dtype", (
            f"P's compressed keys are {theirs.key_bytes} bytes and D's {found.key_bytes} (--attention-config "
            f"indexer_kv_dtype differs): {releases} compares neither their dtype (its compatibility hash does not take "
            f"the attention config) nor, for a hybrid without MLA, their length, and D reads "
            f"{found.key_page_bytes(decode.geometry.block_size)} bytes of each P page as its own keys: they land "
            f"wrong; set the same indexer_kv_dtype on both engines")))
    if semantics == VLLM and verdict.accepts:
        # vLLM's reads of a D rank's ring, where they are not the whole page of one source
        bent = [d for d in range(decode.tp) if indexer_caches.ring_reads(model, prefill, decode, d, exact=False)
                != indexer_caches.ring_reads(model, prefill, decode, d, exact=True)]
        if bent:
            out.append(Warning_("vllm-qsa-ring", (
                f"{releases} reads the {found.ring_name} as head-sharded attention (its region is not "
                f"an MLA spec), though every rank holds the whole page: D rank(s) "
                f"{', '.join(map(str, bent))} read it "
                + ("from past the page (the next layer's ring)" if prefill.tp < decode.tp else
                   f"as {prefill.tp // decode.tp} copies of each source's first slots")
                + "; their rings land wrong")))
    return out


def engine_facts(model: ModelSpec, layout: EngineLayout) -> EngineFacts:
    """What vLLM's compatibility hash takes of one engine of a plan (pull, no speculation)."""
    return EngineFacts(model.name, model.model_dtype, model.num_kv_heads, model.head_size, model.hashed_layers,
                       layout.hashed_backend, layout.geometry.kv_cache_dtype)


def group_tensors(grouping: KVGrouping, decode: EngineLayout) -> tuple[int, ...]:
    """How many tensors each group's descriptor IDs cover: D's release decides (D builds both
    lists of a pull)."""
    rule = decode.release.group_regions
    return tuple(rule(grouping.layers_in(g), grouping.tensors_of(kind)) for g, kind in enumerate(grouping.groups))


def _backend_refusals(p_model: ModelSpec, d_model: ModelSpec, options: PlanOptions) -> tuple[Refusal, ...]:
    """startup: an engine whose MLA layers get no attention backend for the model's dtype
    (``mla_dtype_refusal``) does not start; a verdict names it first, once where both engines meet it."""
    said = {side: (model.model_dtype, mla_dtype_refusal(model, flags.attention_backend))
            for side, model, flags in (("prefill", p_model, options.prefill), ("decode", d_model, options.decode))}
    if said["prefill"] == said["decode"]:
        said = {"neither": said["prefill"]}
    who = {"neither": "vLLM starts neither engine", "prefill": "vLLM does not start the prefill engine",
           "decode": "vLLM does not start the decode engine"}
    return tuple(Refusal("attention-backend", f"{who[side]} with --dtype {dtype}: {words}")
                 for side, (dtype, words) in said.items() if words)


def build_plan(model: ModelSpec, p_tp: int, d_tp: int, options: PlanOptions = PlanOptions()) -> Plan:
    """Plan every read of a P/D pairing, under exact or vLLM semantics, for each engine's release and GPU."""
    if options.semantics not in SEMANTICS:
        raise UserError(f"unknown semantics '{options.semantics}'; choose one of: {', '.join(SEMANTICS)}")
    refused, misread = drafts.past_heads(model, p_tp, d_tp)
    drafted = (options.prefill_model or model, model)
    model = drafts.planned_at(model, p_tp, d_tp)
    grouping = options.grouping or model_grouping(model)
    p_model = _prefill_model(model, options.prefill_model and drafts.planned_at(options.prefill_model, p_tp, d_tp))
    prefill = engine_layout(p_model, p_tp, options.prefill, grouping, options.attention_streams)
    decode = engine_layout(model, d_tp, options.decode, grouping, options.attention_streams)
    prefill = split_remote_blocks(prefill, decode)   # D views P's blocks as vLLM's handshake splits them
    if model.draft_attention and prefill.kernel_tokens != decode.kernel_tokens:
        # kernel blocks cut by tokens: NIXL's target-shaped pieces are not the drafter's heads
        undrafted = options.prefill_model and drafts.target_only(options.prefill_model)
        return build_plan(drafts.target_only(model), p_tp, d_tp, replace(options, prefill_model=undrafted))

    def rebuild(size: int, d_size: int | None = None) -> tuple[EngineLayout, EngineLayout]:
        """Both engines at block size ``size`` (D's ``d_size`` where it differs)."""
        streams = options.attention_streams
        return (engine_layout(p_model, p_tp, with_block_size(options.prefill, size), grouping, streams),
                engine_layout(model, d_tp, with_block_size(options.decode, d_size or size), grouping, streams))

    facts = (engine_facts(p_model, prefill), engine_facts(model, decode))
    met = None
    if refused:     # vLLM's engines keep the drafter, each as its own TP size's ranks group it
        sides = [engine_layout(at, tp, flags, model_grouping(at), options.attention_streams) for at, tp, flags in (
            (drafts.planned_at(drafted[0], p_tp), p_tp, options.prefill),
            (drafts.planned_at(drafted[1], d_tp), d_tp, options.decode))]
        met = (split_remote_blocks(sides[0], sides[1]), sides[1])
    verdict = handshake_verdict(*(met or (prefill, decode)), rebuild, extra=_layout_refusal(prefill, decode),
                                facts=facts, draft_groups=refused)
    verdict = _with_kv_layout(verdict, model, p_tp, d_tp, options.kv_cache_layout)
    verdict = families.first("with_refusals", verdict, model, prefill, decode, rebuild, p_model) or verdict
    verdict = not_started_first(verdict, _backend_refusals(p_model, model, options))
    raw = plan_reads(prefill.ranks, decode.ranks, options.semantics)
    reads = coalesce(raw) if options.coalesce else raw
    releases = verdict.releases

    warnings: list[Warning_] = []
    ratio = tp_ratio(p_tp, d_tp)
    if not verdict.accepts:
        fix = (f"; {verdict.fix_words()} makes vLLM accept it" if verdict.fix_words() else "")
        if verdict.suggested_layout and verdict.suggested_layout != CONNECTOR_LAYOUT:
            fix += (f" ({verdict.suggested_layout}: the block-contiguous layout this model's backends allow, "
                    f"where vLLM's message names {CONNECTOR_LAYOUT})")
        found = (families.first("ple_fix", rebuild, model, prefill, decode, p_model)
                 if any(r.code == "ple-geometry" for r in verdict.refusals) else None)
        fix += f"; --block-size {found[0]} on P and {found[1]} on D give both the same PLE page" if found else ""
        tail = "" if options.semantics == VLLM else "; this plan is mambaxfer's exact plan"
        warnings.append(Warning_("vllm-refuses", f"{releases} refuses P TP {p_tp} / D TP {d_tp}: "
                                 + " ".join(r.message for r in verdict.refusals).rstrip(".") + fix + tail))
    # what P's SSM state differs from D's in (vLLM's handshake compares none of it)
    differs = [f"{label} ({getattr(p_model, key)} vs {getattr(model, key)})" for key, label in (
        ("conv_dtype", "conv dtype"), ("ssm_dtype", "SSM dtype"), ("num_spec", "speculative tokens"))
        if getattr(p_model, key) != getattr(model, key)]
    failing = _length_warning(prefill, decode, differs, releases) if options.semantics == VLLM else []
    warnings += failing
    if options.semantics == VLLM and not failing:      # with failing READs none is posted: nothing lands wrong
        code, lead = ("vllm-state-differs", (
            f"P's state differs from D's in {' and '.join(differs)}, which {releases} does not compare; D reads "
            f"P's state with its own offsets, so these reads land wrong bytes")) if differs else (
            "vllm-replicated-groups", f"{releases}'s offsets assume every region is evenly sharded, but B/C groups "
            "are replicated here, so these reads corrupt the state (use --semantics exact)")
        warnings += _misread_warning(raw, prefill.ranks, decode.ranks, code, lead)
    elif options.semantics != VLLM and ratio is not None and not any(r.code == "layout" for r in verdict.refusals):
        warnings += _misread_warning(vllm_reads(prefill.ranks, decode.ranks), prefill.ranks, decode.ranks,
                                     "vllm-differs", f"{releases} would read wrong bytes for this pairing")
    warnings += families.first("plan_notes", model, p_model, prefill, decode, verdict, releases,
                               options.semantics) or []
    warnings += _indexer_notes(model, p_model, prefill, decode, verdict, releases, options.semantics)
    if verdict.accepts and verdict.needs_remote_num_tokens:
        warnings.append(Warning_("remote-num-tokens", (
            f"{releases} pairs P's and D's blocks from the request's last token here (kernel blocks "
            f"{prefill.kernel_tokens} × {prefill.geometry.blocks_per_logical} vs {decode.kernel_tokens} × "
            f"{decode.geometry.blocks_per_logical}): the proxy must forward remote_num_tokens in "
            f"kv_transfer_params, or D declines the reads")))
    if (model.num_spec or p_model.num_spec) and options.drafted is not False and not model.draft_layers:
        where = "" if options.drafted else "where a model drafts them (MTP, EAGLE, a draft model; not n-gram), "
        why = misread + (drafts.unplanned(model, options.drafter) if options.drafter else "")
        warnings.append(Warning_("draft-layers", (
            f"speculative decoding ({p_model.num_spec} tokens on P, {model.num_spec} on D): {where}{drafts.RULE}; "
            f"{why}mambaxfer plans the target's layers only, so with those layers the groups, tensors and "
            f"descriptor IDs differ (each SSM layer's reads do not)")))
    split = prefill.geometry.split_by_remote
    if split > 1:
        warnings.append(Warning_("vllm-splits-blocks", (
            f"{releases}'s D views each of P's {prefill.kernel_tokens * split}-token kernel blocks as {split} "
            f"blocks of {prefill.kernel_tokens} tokens (_split_remote_blocks: hybrid MLA blocks differ with TP), "
            f"so P has {prefill.geometry.blocks_per_logical} kernel blocks per logical block in its reads")))
    for name, side in (("P", prefill), ("D", decode)):
        if side.geometry.overridden:
            warnings.append(Warning_("not-vllm-geometry", f"{name}'s kernel blocks per logical block are set "
                                     f"by hand to {side.geometry.blocks_per_logical}; vLLM {side.release.name} "
                                     f"derives {side.geometry.derived_blocks_per_logical}: this is not the "
                                     f"engine vLLM builds"))

    scales = drafts.block_scales(model, grouping, d_tp)
    request = _request(options, grouping.groups, prefill, decode, scales)
    tensors = group_tensors(grouping, decode)
    dreads = _descriptor_reads(reads, prefill, decode, grouping.groups, request, options.semantics, tensors, scales)
    moved = DescriptorMap(grouping.groups, prefill.lists, decode.lists, request, tuple(dreads), tensors)
    numbered = _numbering(model, grouping, prefill, decode, options.semantics)
    descriptors = moved
    if numbered is not None:
        vreads = _descriptor_reads(reads, prefill, decode, grouping.groups, request, options.semantics, tensors,
                                   scales, numbered)
        descriptors = DescriptorMap(grouping.groups, numbered.prefill, numbered.decode, request, tuple(vreads),
                                    tensors, numbered.group_streams)
    return Plan(model, options.semantics, ratio, prefill, decode, reads, descriptors, tuple(warnings),
                grouping, verdict, uncoalesced_reads=raw,
                prefill_model=p_model if p_model is not model else None,
                moved=moved if numbered is not None else None, met=met)
