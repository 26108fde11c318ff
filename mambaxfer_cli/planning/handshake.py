"""What vLLM 0.33's NIXL handshake says of a P/D pairing: accepted, or refused with its message.

D (local) checks P (remote) when it adds P's agent (``nixl/base_worker.py``): the compatibility
hash first (model, dtype, KV heads, head size, layers, the first cache layer's backend, KV-cache
dtype, speculative settings, transfer mode), then the TP ratio, the kernel block sizes
(``TransferTopology.block_size_ratio``), prefix caching against different kernel blocks per
logical block, and head-sharded attention across different block sizes. It never compares the
SSM dtypes, the conv-state layout, the conv rows or the SSM state sizes: a mismatch there is
accepted and corrupts the state silently.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from mambaxfer_cli.planning.engine import Side
from mambaxfer_cli.planning.geometry import MAX_BLOCK_SIZE, EngineFlags, backend
from mambaxfer_cli.planning.reads import tp_ratio

NOT_CHECKED = ("SSM dtypes (conv and temporal)", "the conv-state layout (VLLM_SSM_CONV_STATE_LAYOUT)",
               "conv rows (num_spec)", "SSM state sizes")
GEOMETRY_CODES = ("block-size", "prefix-caching", "head-sharded-block-size")
SEARCH_LIMIT = 8192     # tokens: the largest --block-size suggested


@dataclass(frozen=True)
class Refusal:
    code: str       # compat-hash | tp-sizes | block-size | prefix-caching | head-sharded-block-size
    message: str    # vLLM's own words

    def to_dict(self) -> dict:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class Verdict:
    refusals: tuple[Refusal, ...]
    suggested_block_size: int | None = None

    @property
    def accepts(self) -> bool:
        return not self.refusals

    def to_dict(self) -> dict:
        return {"accepts": self.accepts, "refusals": [r.to_dict() for r in self.refusals],
                "suggested_block_size": self.suggested_block_size,
                "not_checked": list(NOT_CHECKED)}


def attention_sources(prefill: Side, decode: Side, d_rank: int) -> list[int]:
    """``compute_tp_mapping``: the P ranks D rank ``d_rank`` reads attention KV from."""
    p_tp, d_tp = prefill.tp, decode.tp
    if prefill.kv_heads[0] is None:
        return []
    if d_tp >= p_tp:
        return [d_rank * p_tp // d_tp]
    a = p_tp // d_tp
    firsts, seen = [], set()
    for q in range(d_rank * a, d_rank * a + a):
        head = prefill.kv_heads[q].start
        if head not in seen:
            seen.add(head)
            firsts.append(q)
    return firsts


def refusals(prefill: Side, decode: Side) -> list[Refusal]:
    """vLLM 0.33's refusals of this pairing, in the order its handshake meets them (vLLM stops at
    the first; the others are what it would say once that one is fixed)."""
    p, d = prefill.geometry, decode.geometry
    out = []
    if (prefill.hashed_backend, p.kv_cache_dtype) != (decode.hashed_backend, d.kv_cache_dtype):
        differs = [f"{what} {a} vs {b}" for what, a, b in (
            ("attention backend", decode.hashed_backend, prefill.hashed_backend),
            ("KV-cache dtype", d.kv_cache_dtype, p.kv_cache_dtype)) if a != b]
        out.append(Refusal("compat-hash", (
            "NIXL compatibility hash mismatch. Prefill and decode instances have incompatible "
            "configurations. This may be due to: different vLLM versions, models, dtypes, KV cache "
            f"layouts, attention backends, etc. ({'; '.join(differs)}, D vs P)")))
    ratio = tp_ratio(prefill.tp, decode.tp)
    if ratio is None:
        big, small = (decode.tp, prefill.tp) if decode.tp >= prefill.tp else (prefill.tp, decode.tp)
        first, second = ("Local", "remote") if decode.tp >= prefill.tp else ("Remote", "local")
        out.append(Refusal("tp-sizes", f"{first} tensor parallel size {big} is not divisible by {second} "
                                       f"tensor parallel size {small}."))
        return out
    if not prefill.has_attention:
        return out
    if d.kernel_block_size % p.kernel_block_size:
        out.append(Refusal("block-size", f"Local block size {d.kernel_block_size} is not divisible by remote "
                                         f"block size {p.kernel_block_size} or vice versa."))
        return out
    if d.prefix_caching and p.blocks_per_logical != d.blocks_per_logical:
        out.append(Refusal("prefix-caching", (
            "Prefix caching with heterogeneous physical_blocks_per_logical is not supported for Mamba "
            f"hybrid models. Local: {d.blocks_per_logical}, Remote: {p.blocks_per_logical}. "
            "Disable prefix caching with --disable-prefix-caching.")))
    block_ratio = d.kernel_block_size // p.kernel_block_size
    if ratio < 0 and block_ratio != 1:
        heads = {prefill.kv_heads[q].start for q in attention_sources(prefill, decode, 0)}
        replicated = prefill.tp > (prefill.kv_heads[-1].end or 1)
        if len(heads) > 1 and not replicated:
            out.append(Refusal("head-sharded-block-size", "Head-sharded attention reads with P_TP > D_TP and "
                                                          "heterogeneous block sizes are not supported"))
    return out


def reads_whole_kernel_blocks(prefill: Side, decode: Side) -> bool:
    """Whether vLLM's attention reads keep D's layout: equal kernel blocks, or one KV head per D
    rank (with a larger D kernel block vLLM reads P's blocks whole into sub-blocks of D's, which
    interleaves the heads of a D rank that holds several)."""
    return decode.kernel_tokens == prefill.kernel_tokens or len(decode.kv_heads[0] or ()) <= 1


def suggest_block_size(rebuild: Callable[[int], tuple[Side, Side]], step: int) -> int | None:
    """The smallest ``--block-size`` (for both engines, in the backend's steps) at which vLLM's
    geometry checks pass and its attention reads keep D's layout, or None when none up to
    SEARCH_LIMIT does."""
    for size in range(step, min(SEARCH_LIMIT, MAX_BLOCK_SIZE) + 1, step):
        prefill, decode = rebuild(size)
        if (not any(r.code in GEOMETRY_CODES for r in refusals(prefill, decode))
                and reads_whole_kernel_blocks(prefill, decode)):
            return size
    return None


def verdict(prefill: Side, decode: Side, rebuild: Callable[[int], tuple[Side, Side]] | None = None,
            extra: tuple[Refusal, ...] = ()) -> Verdict:
    """vLLM's verdict; where its geometry checks refuse and ``rebuild`` can re-derive both sides
    at another block size, the smallest block size that fixes it."""
    found = tuple(refusals(prefill, decode)) + tuple(extra)
    suggestion = None
    mixes_heads = prefill.has_attention and not reads_whole_kernel_blocks(prefill, decode)
    if rebuild is not None and (any(r.code in GEOMETRY_CODES for r in found) or mixes_heads):
        suggestion = suggest_block_size(rebuild, backend(decode.geometry.attention_backend).step)
    return Verdict(found, suggestion)


def with_block_size(flags: EngineFlags, size: int) -> EngineFlags:
    return replace(flags, block_size=size)
