"""Qwen4Exp in vLLM (``models/qwen4_exp``): its PLE state, QSA indexer caches and the NIXL connector's
CSA-linear path (docs/reference.md, "Qwen4Exp: the PLE state and the QSA caches")."""

from __future__ import annotations

import math
from typing import Any, Callable

from dataclasses import replace

from mambaxfer_cli.engines.vllm import circular_buffer
from mambaxfer_cli.engines.vllm.circular_buffer import IndexerCaches
from mambaxfer_cli.engines.vllm.engine import KEYS, PAGES, STATE, EngineLayout, Region, registered_regions
from mambaxfer_cli.engines.vllm.geometry import Backend, EngineFlags, Geometry
from mambaxfer_cli.engines.vllm.kv_groups import PLE, RING
from mambaxfer_cli.engines.vllm.handshake import Verdict, geometry_refused
from mambaxfer_cli.engines.vllm.plan import Warning_
from mambaxfer_cli.engines.vllm.release import Refusal
from mambaxfer_cli.errors import Refused, UserError, quoted
from mambaxfer_cli.families.qwen4exp import parts
from mambaxfer_cli.planning.dtypes import dtype_bytes
from mambaxfer_cli.planning.model import ATTENTION, SSM, ModelSpec
from mambaxfer_cli.readers.model_config import DtypeFacts

MTP_METHODS = {"0.33": ("qwen4_exp_mtp",)}
MAMBA_SSM_DTYPE_READERS = ("Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration", "Qwen4ExpMTP")


def mtp_layers_built(hf: Any) -> int | None:
    """The QSA layers Qwen4ExpMultiTokenPredictor builds of vLLM's loaded config (the probe's):
    its text config's ``mtp_num_hidden_layers``, 1 where absent."""
    if getattr(hf, "model_type", "") not in ("qwen4_exp", "qwen4_exp_text"):
        return None
    return int(getattr(getattr(hf, "text_config", hf), "mtp_num_hidden_layers", 1))


# AttentionConfig.indexer_kv_dtype (config/attention.py IndexerKVDType), and what QSA's indexer
# makes of each (QSAIndexer.__init__: "auto" is bf16; mxfp4 and nvfp4 stop the engine).
INDEXER_KV_DTYPES = ("auto", "bf16", "fp8", "mxfp4", "nvfp4")


def indexer_kv_dtype(facts: DtypeFacts) -> dict[str, str] | None:
    """The QSA compressed keys' dtype vLLM starts a Qwen4Exp model with (``dtypes``): bf16 or fp8."""
    if facts.family.parts is not parts:
        return None
    value = "auto" if facts.indexer_kv_dtype is None else str(facts.indexer_kv_dtype).strip().lower()
    if value not in INDEXER_KV_DTYPES:
        raise UserError(f"indexer_kv_dtype: indexer_kv_dtype must be one of {', '.join(INDEXER_KV_DTYPES)} "
                        f"(vLLM's AttentionConfig), got {quoted(facts.indexer_kv_dtype)}")
    if value in ("mxfp4", "nvfp4"):
        raise Refused(f"indexer_kv_dtype: vLLM does not start a Qwen4Exp engine with it: \"indexer_kv_dtype="
                      f"'{value}' is not supported by the Qwen4Exp QSA indexer (only 'bf16' or 'fp8').\" "
                      f"(NotImplementedError in QSAIndexer.__init__)")
    return {"indexer_kv_dtype": "bf16" if value == "auto" else value}


# The layouts QSA's indexer backend declares (``QSAIndexerBackend.supported_kv_cache_layouts``), so
# the only ones ``resolve_kv_cache_layout`` may pick: the NIXL connector's LBHNC is dropped with a
# warning and the engine runs the first, BLNHC, unless VLLM_KV_CACHE_LAYOUT names the other
# (engines/vllm/kv_layout.py).
QSA_LAYOUTS = ("BLNHC", "BLHNC")


def layouts(model: ModelSpec) -> tuple[str, ...] | None:
    """The KV-cache layouts an engine of ``model`` may run: QSA's two, or None (no QSA: vLLM's
    default preference applies)."""
    q = model.ple_qsa
    return QSA_LAYOUTS if q is not None and q.has_qsa else None


def kv_caches(model: ModelSpec) -> dict[int, tuple[str, ...]] | None:
    """What a layer registers (Qwen4ExpDecoderLayer: its PLE layer before its mixer; a QSA layer's
    indexer its ring and compressed keys, of the attention bucket, before the layer)."""
    q = model.ple_qsa
    if q is None:
        return None
    found: dict[int, tuple[str, ...]] = {i: (PLE, SSM) for i in q.ple_layers}
    return found | ({i: (RING, ATTENTION) for i in model.attention_indices} if q.has_qsa else {})


# The backend QSA layers run whatever --attention-backend says (``Qwen4ExpQSAAttention.__init__``
# sets it; ``QSA_BACKEND_CLASS``: its class by release), on kernel blocks of any multiple of 16
# (``get_supported_kernel_block_sizes``): ``select_common_block_size`` never splits their block.
QSA_BACKEND = Backend("QWEN4_EXP_QSA_TRITON", multiple_of=16)
QSA_BACKEND_CLASS = ("vllm.models.qwen4_exp.nvidia.qsa", ("Qwen4ExpQSABackend", "Qwen4ExpQSAFlashAttentionBackend"))


def kernel(model: ModelSpec, flags: EngineFlags) -> Backend | None:
    q = model.ple_qsa
    return QSA_BACKEND if q is not None and q.has_qsa else None


def regions(model: ModelSpec, geometry: Geometry, ssm_slots: int, keyed_by_length: bool) -> tuple[Region, ...] | None:
    """Every NIXL region of a Qwen4Exp engine with QSA as ``register_kv_caches`` records it: views of one
    block row, in its order: the SSM slots' (and the PLE page), the rings', the keys', the attention's."""
    found, q = indexer_caches(model), model.ple_qsa
    if found is None or q is None:
        return None
    page, layers = geometry.page_bytes, model.attention_layers
    keys, ring = found.key_page_bytes(geometry.block_size), found.ring_page_bytes
    return registered_regions([(i * page, page, STATE) for i in range(ssm_slots)]
                              + [(0, page, STATE)] * bool(q.ple_layers)
                              + [(j * ring, ring, RING) for j in range(layers)]
                              + [(j * keys, keys, KEYS) for j in range(layers)]
                              + [(layers * keys + j * page, page, PAGES) for j in range(layers)], keyed_by_length)


def ple_state_bytes(model: ModelSpec) -> int:
    """One PLE layer's state on any rank (``tp_world_size=1``): channels × (state_len + num_spec) in
    the conv dtype (``short_conv_state_dtype``); 0 without PLE layers."""
    q = model.ple_qsa
    return q.ple_state_bytes(model.num_spec, dtype_bytes(model.conv_dtype)) if q is not None else 0


def ple_page_bytes(model: ModelSpec, side: EngineLayout) -> int:
    """The PLE page as the connector registers it (``_ple_block_len``): the spec's page, padded to the
    attention page where vLLM pads mamba pages (``mamba_page_size_padded``)."""
    own = ple_state_bytes(model)
    g = side.geometry
    if g.attention_bytes_per_token is None or g.page_bytes <= g.state_bytes:
        return own
    return g.page_bytes


def ring_tokens(model: ModelSpec) -> int | None:
    """The QSA raw-key ring's capacity (``circular_buffer.qsa_ring_tokens``); None without QSA."""
    q = model.ple_qsa
    if q is None or q.compress_ratio is None:
        return None
    return circular_buffer.qsa_ring_tokens(q.compress_ratio, model.num_spec)


def refusals(model: ModelSpec, prefill: EngineLayout, decode: EngineLayout,
             p_model: ModelSpec | None = None, push: bool = False) -> tuple[Refusal, ...]:
    """vLLM's refusals of a Qwen4Exp pairing that its other checks do not make, in its order (the local
    engine is D when it pulls, P when P pushes)."""
    q = model.ple_qsa
    if q is None:
        return ()
    if q.ple_layers and not q.has_qsa:
        # register_kv_caches: a tp_replicated MambaSpec outside a CSA-linear worker.
        return (Refusal("ple-without-qsa", (
            "the NIXL connector registers a TP-replicated PLE state only beside a CircularBufferSpec "
            "(QSA) group; without indexer_n_heads the decode worker stops at start-up"),
            raised="AssertionError in register_kv_caches (assert self._is_csa_linear)"),)
    # QSARawKeyCache.get_kv_cache_spec: the engine does not start
    rings = circular_buffer.ring_refusals("qsa-ring", "QSA raw-key", (
        (name, side.geometry.block_size, ring_tokens(spec))
        for name, side, spec in (("P", prefill, p_model or model), ("D", decode, model))))
    if rings:
        return rings
    local, remote = (prefill, decode) if push else (decode, prefill)
    said = circular_buffer.csa_linear_refusal(model.num_kv_heads or 0, local.tp, remote.tp) if q.has_qsa else None
    if said:
        return (Refusal("csa-linear-tp", said),)       # _nixl_handshake raises before any metadata is read
    if q.ple_layers:
        pages = {"D": ple_page_bytes(model, decode), "P": ple_page_bytes(p_model or model, prefill)}
        here, there = (pages["P"], pages["D"]) if push else (pages["D"], pages["P"])
        if here != there:
            return (Refusal("ple-geometry", f"PLE pages require identical P/D geometry: local={here}, "
                                            f"remote={there}."),)
    return ()


def side_cache(model: ModelSpec, side: EngineLayout) -> str | None:
    """The PLE state as ``inspect`` shows one engine's caches."""
    q = model.ple_qsa
    if q is None or not q.ple_layers:
        return None
    return (f"PLE state {ple_state_bytes(model)} B on every rank ({len(q.ple_layers)} layer(s), TP-replicated), "
            f"page {ple_page_bytes(model, side)} B")


def ple_sources(prefill: EngineLayout, decode: EngineLayout, d_rank: int) -> list[int]:
    """The P ranks D rank ``d_rank`` reads the whole, replicated PLE page from (``compute_tp_mapping``'s
    SSM sources: every P rank of its share when P has more ranks, else one)."""
    if prefill.tp > decode.tp:
        share = prefill.tp // decode.tp
        return list(range(d_rank * share, (d_rank + 1) * share))
    return [d_rank * prefill.tp // decode.tp]


def ple_fix(rebuild: Callable[[int, int], tuple[EngineLayout, EngineLayout]], model: ModelSpec,
            prefill: EngineLayout, decode: EngineLayout, p_model: ModelSpec | None = None,
            limit: int = 64) -> tuple[int, int] | None:
    """The smallest ``--block-size`` pair (P's, D's) at which both engines have the same PLE page
    and vLLM refuses nothing else of Qwen4Exp's (blocks inverse to each side's attention bytes per token)."""
    if model.ple_qsa is None:
        return None
    a_p, a_d = prefill.geometry.attention_bytes_per_token, decode.geometry.attention_bytes_per_token
    if a_p is None or a_d is None:
        return None
    step = math.lcm(a_p, a_d)
    start = math.ceil(max(prefill.geometry.state_bytes, decode.geometry.state_bytes) / step)
    for k in range(start, start + limit * 64):
        p_block, d_block = k * step // a_p, k * step // a_d
        if p_block % prefill.kernel_backend.step or d_block % decode.kernel_backend.step:
            continue
        p, d = rebuild(p_block, d_block)
        if (not refusals(model, p, d, p_model) and not geometry_refused(p, d)
                and p.geometry.block_size == p_block and d.geometry.block_size == d_block):
            return p_block, d_block
    return None


# An engine that does not start, then _nixl_handshake's check before the peer's metadata is read.
FIRST = ("qsa-ring", "csa-linear-tp")


def with_refusals(verdict: Verdict, model: ModelSpec, prefill: EngineLayout, decode: EngineLayout,
                  rebuild: Callable[[int], tuple[EngineLayout, EngineLayout]],
                  p_model: ModelSpec | None = None, push: bool = False) -> Verdict | None:
    """The handshake's verdict with Qwen4Exp's refusals in vLLM's order; a same-size block
    suggestion is kept only where vLLM then refuses nothing of Qwen4Exp's either."""
    if model.ple_qsa is None:
        return None
    found = refusals(model, prefill, decode, p_model, push)
    if not found:
        return verdict
    first = tuple(r for r in found if r.code in FIRST)
    last = tuple(r for r in found if r.code not in FIRST)
    suggested = verdict.suggested_block_size
    if suggested is not None and refusals(model, *rebuild(suggested), p_model, push):
        suggested = None
    if any(r.code == "csa-linear-tp" for r in first):
        # Another TP size is the fix: the head split it would meet is not listed.
        kept = tuple(r for r in verdict.refusals if r.code != "kv-cache-layout-heads")
        verdict = replace(verdict, refusals=kept, suggested_layout=None)
    return replace(verdict, refusals=first + verdict.refusals + last, suggested_block_size=suggested)


# QSARawKeyCache: with M-RoPE each token's three int64 positions follow its key, 4 bf16 slots each,
# after the key rounded up to 4 slots.
_POSITION_SLOTS, _ROPE_AXES = 4, 3


def indexer_caches(model: ModelSpec) -> IndexerCaches | None:
    """The raw-key ring's slot (the key in bfloat16, and with M-RoPE its positions:
    ``QSARawKeyCache.__init__``) and a compressed key in the indexer's dtype (``QSAIndexer.__init__``)."""
    q = model.ple_qsa
    if q is None or not q.has_qsa:
        return None
    ring = ring_tokens(model)
    assert q.compress_ratio is not None and ring is not None and q.indexer_head_dim is not None
    slots = q.indexer_head_dim
    if q.rope_positions:
        slots = -(-slots // _POSITION_SLOTS) * _POSITION_SLOTS + _ROPE_AXES * _POSITION_SLOTS
    key = q.indexer_head_dim * dtype_bytes("float8_e4m3fn" if q.indexer_kv_dtype == "fp8" else "bfloat16")
    return IndexerCaches("QSA", "QSA raw-key ring", ring, slots * dtype_bytes("bfloat16"), q.compress_ratio,
                         key, model.mla, "qwen4exp-qsa", "indexed-attention")


def plan_notes(model: ModelSpec, p_model: ModelSpec, prefill: EngineLayout, decode: EngineLayout,
                    verdict: Verdict, releases: str, semantics: str) -> list[Warning_] | None:
    """What this plan's reads leave out of Qwen4Exp: its PLE page; and a PLE state that differs
    inside pages vLLM finds equal."""
    q = model.ple_qsa
    if q is None:
        return None
    out = []
    p_state, d_state = ple_state_bytes(p_model), ple_state_bytes(model)
    if q.ple_layers and verdict.accepts and p_state != d_state:
        out.append(Warning_("vllm-ple-differs", (
            f"P's PLE state is {p_state} bytes and D's {d_state} (speculative rows or dtype differ), but "
            f"both pages are padded to {ple_page_bytes(model, decode)} B, so {releases} accepts "
            f"them and D reads P's page whole: its PLE conv state lands on the wrong rows")))
    if q.ple_layers:
        sources = {len(ple_sources(prefill, decode, d)) for d in range(decode.tp)}
        out.append(Warning_("qwen4exp-ple", (
            f"PLE: {len(q.ple_layers)} TP-replicated page(s) of {ple_state_bytes(model)} bytes of "
            f"state (page {ple_page_bytes(model, decode)} B on D, "
            f"{ple_page_bytes(model, prefill)} B on P); each D rank reads the whole page from "
            f"each of its {max(sources)} source P rank(s), the same bytes from each; not in the reads "
            f"above")))
    return out


# The classes the conformance probe asks for: by release, QSA's backend, ring and key caches; and the
# model class that sizes the PLE state.
QSA_CLASSES = ((("vllm.models.qwen4_exp.common.qsa_indexer", "QSAIndexerBackend", "QSARawKeyCache",
                 "QSACompressedKeyCache"),
                ("vllm.models.qwen4_exp.common.qsa_cache", "QSAStateBackend", "QSAKeyStateCache",
                 "QSACompressedKeyCache")),
               ("vllm.models.qwen4_exp.nvidia.model", "Qwen4ExpForCausalLM"))
