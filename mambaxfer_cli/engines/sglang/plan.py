"""One SGLang pairing planned whole: the entries each side registers, the rank mapping, the writes
SGLang posts per slot and layer (and the descriptors they become), the exact writes, and the
verdict. The document a ``plan --engine sglang`` shows."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping

from mambaxfer_cli.engines.sglang.drafts import Draft
from mambaxfer_cli.engines.sglang.entries import TransferEntry, beside_entries, transfer_entries
from mambaxfer_cli.engines.sglang.heads import HeadSlice, head_slice
from mambaxfer_cli.engines.sglang.families import merged
from mambaxfer_cli.engines.sglang.kv import KVSide, dsa_page_size, forced_page_size, kv_entries
from mambaxfer_cli.engines.sglang.ranks import RankMapping, rank_mapping, writers
from mambaxfer_cli.engines.sglang.release import NIXL, SGLANG_0_5_23, Release
from mambaxfer_cli.engines.sglang.shapes import sglang_model, state_shape
from mambaxfer_cli.engines.sglang.verdict import Verdict, verdict
from mambaxfer_cli.engines.sglang.writes import StateWrite, check_side, exact_writes, sglang_writes
from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.planning.model import ModelSpec


@dataclass(frozen=True)
class Descriptor:
    """One write as SGLang posts it: from prefill entry ``src_entry`` at ``src_offset`` bytes past
    that entry's base pointer to decode entry ``dst_entry`` (``item_len · slot + offset``)."""

    p_rank: int
    d_rank: int
    layer_id: int
    src_entry: int
    src_offset: int
    dst_entry: int
    dst_offset: int
    length: int


@dataclass(frozen=True)
class SGLangPlan:
    release: Release
    model: ModelSpec                      # in SGLang's dtypes
    p_tp: int
    d_tp: int
    backend: str
    prefill_entries: tuple[TransferEntry, ...]
    decode_entries: tuple[TransferEntry, ...]
    mapping: tuple[RankMapping, ...]
    writes: tuple[StateWrite, ...]        # SGLang's, one slot of one layer
    exact: tuple[StateWrite, ...]         # the right bytes, one slot of one layer
    head_slices: tuple[tuple[int, int, HeadSlice], ...]   # (d_rank, p_rank, slice) where TP differs
    verdict: Verdict
    draft: Draft | None = None            # the draft model's KV pool, appended after the target's KV

    def descriptors(self, p_slot: int = 0, d_slot: int = 0) -> tuple[Descriptor, ...]:
        """SGLang's writes for one request in slots ``p_slot`` and ``d_slot``, every layer."""
        out = []
        index = {(e.field, e.layer_id): i for i, e in enumerate(self.decode_entries)}
        for i, src in enumerate(self.prefill_entries):
            j = index[(src.field, src.layer_id)]
            dst = self.decode_entries[j]
            for w in self.writes:
                if w.field == src.field:
                    out.append(Descriptor(w.p_rank, w.d_rank, src.layer_id, i, src.item_len * p_slot + w.src, j,
                                          dst.item_len * d_slot + w.dst, w.length))
        return tuple(sorted(out, key=lambda d: (d.d_rank, d.p_rank, d.src_entry)))

    @property
    def dsa_entries(self) -> tuple[TransferEntry, ...]:
        """A DSA model's attention entries (``DSATokenToKVPool``: latent, then index keys, per
        attention layer, alike on every rank) at the page SGLang sets; none for other models."""
        page = dsa_page_size(self.model)
        return kv_entries(KVSide(self.model, self.d_tp, page)) if page else ()

    @property
    def state_page(self) -> int | None:
        """The page SGLang sets where a replicated state is kept per page (a QSA model's compressed
        keys, ``PAGED_STATES``), else None."""
        paged = merged("PAGED_STATES")
        return forced_page_size(self.model) if any(e.field in paged for e in self.decode_entries) else None

    def to_dict(self) -> dict[str, Any]:
        dsa = self.dsa_entries
        return {
            "engine": "sglang", "release": self.release.version, "model": self.model.name,
            "p_tp": self.p_tp, "d_tp": self.d_tp, "backend": self.backend,
            "dtypes": {"conv": self.model.conv_dtype, "temporal": self.model.ssm_dtype,
                       "origin": dict(self.model.origin)},
            "entries": {"prefill": [e.to_dict() for e in self.prefill_entries],
                        "decode": [e.to_dict() for e in self.decode_entries]},
            "rank_mapping": [{**asdict(m), "target_ranks": list(m.target_ranks)} for m in self.mapping],
            "writes": [w.to_dict() for w in self.writes],
            "exact": [w.to_dict() for w in self.exact],
            "head_slices": [{"d_rank": d, "p_rank": p, **asdict(s)} for d, p, s in self.head_slices],
            "verdict": self.verdict.to_dict(),
            "draft": self.draft.to_dict() if self.draft else None,
            "dsa_pool": {"page_size": dsa_page_size(self.model),
                         "entries": [e.to_dict() for e in dsa]} if dsa else None,
        }


def plan(model: ModelSpec, p_tp: int, d_tp: int, *, backend: str = NIXL, p_env: Mapping[str, str] | None = None,
         d_env: Mapping[str, str] | None = None, release: Release = SGLANG_0_5_23,
         draft: Draft | None = None) -> SGLangPlan:
    """SGLang's transfer of ``model``'s state from P TP ``p_tp`` to D TP ``d_tp``, with ``draft``'s
    KV on both sides; exact writes only where both sides keep the state in the same dtypes."""
    if backend not in release.backends:
        raise UserError(f"unknown transfer backend '{backend}'; choose one of: {', '.join(release.backends)}")
    target_pages = (model.num_kv_heads, model.head_size)    # as SGLang's slicing assumes the draft's are
    if draft is not None and p_tp != d_tp and (draft.num_kv_heads, draft.head_size) != target_pages:
        what = (f"{draft.source}: {draft.num_kv_heads} KV heads of {draft.head_size}, the target "
                 f"{model.num_kv_heads} of {model.head_size}")
        if backend != NIXL:
            raise Refused(f"{what}; SGLang's Mooncake sender fails each request whose TP sizes differ: "
                          f"\"head-sliced transfer assumes one item length for every KV entry\" (send_kvcache_slice)")
        raise UserError(f"{what}; where the TP sizes differ SGLang's NIXL sender slices the draft's pages with "
                        f"the target's heads (_init_hetero_tp_prep_handle), which mambaxfer does not plan")
    p_spec, spec = sglang_model(model, p_env, release), sglang_model(model, d_env, release)
    p_side, d_side = check_side(p_spec, p_tp, release), check_side(spec, d_tp, release)
    # SGLang's own layer numbers (MambaPool.get_state_layer_ids: the config class's
    # mamba2_cache_params.layers, MLP and attention layers counted), which pair the two sides' entries.
    layer_ids = spec.ssm_layer_ids
    outcome = verdict(model, p_tp, d_tp, backend=backend, p_env=p_env, d_env=d_env, release=release)
    same_dtypes = (p_spec.conv_dtype, p_spec.ssm_dtype) == (spec.conv_dtype, spec.ssm_dtype)
    writes = () if outcome.refusal else sglang_writes(p_side, d_side, backend, release)
    heads: list[tuple[int, int, HeadSlice]] = []
    if spec.num_kv_heads and p_tp != d_tp and not spec.mla:    # MLA sends whole latent pages
        heads = [(d, p, head_slice(src_tp=p_tp, dst_tp=d_tp, src_rank=p, dst_rank=d, kv_heads=spec.num_kv_heads))
                 for d in range(d_tp) for p in writers(p_tp, d_tp, d)]
    band = draft.band if draft is not None and draft.mtp else None     # the draft's QSA states
    return SGLangPlan(
        release, spec, p_tp, d_tp, backend,
        transfer_entries(state_shape(p_spec, p_tp), p_spec.conv_dtype, p_spec.ssm_dtype, layer_ids)
        + beside_entries(p_spec, draft_band=band),
        transfer_entries(state_shape(spec, d_tp), spec.conv_dtype, spec.ssm_dtype, layer_ids)
        + beside_entries(spec, draft_band=band),
        tuple(rank_mapping(p_tp, d_tp, d) for d in range(d_tp)), writes,
        exact_writes(p_side, d_side) if same_dtypes else (), tuple(heads), outcome, draft)
