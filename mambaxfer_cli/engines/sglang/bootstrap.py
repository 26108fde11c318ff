"""What SGLang refuses before or while it moves a request's state, in its own words."""

from __future__ import annotations

from dataclasses import dataclass

from mambaxfer_cli.engines.sglang.release import MOONCAKE, NIXL, SGLANG_0_5_23, Release


@dataclass(frozen=True)
class Server:
    """One side's settings that SGLang's bootstrap compares."""

    tp: int
    pp: int = 1
    page_size: int = 1
    kv_cache_dtype: str = "auto"
    unified_memory: bool = False
    replicated_state: bool = False    # a state item replicated across attention TP (dim 0)
    qsa_state: bool = False           # QSA indexer state beside the KV (QSATokenToKVPool)
    qsa_page_bytes: int = 0           # its compressed keys' item: one full-KV page's (--qsa-indexer-dtype)


@dataclass(frozen=True)
class Refusal:
    where: str        # SGLang's file and function
    message: str      # as SGLang says it

    def __str__(self) -> str:
        return self.message


def refusals(prefill: Server, decode: Server, backend: str = NIXL,
             release: Release = SGLANG_0_5_23) -> tuple[Refusal, ...]:
    """Every refusal the pairing meets, in the order SGLang meets them."""
    if backend not in release.backends:
        raise ValueError(backend)
    out = []
    if prefill.page_size != decode.page_size:
        out.append(Refusal("disaggregation/common/conn.py (prefill server info check)",
                           release.message("page_size", prefill=prefill.page_size, decode=decode.page_size)))
    if prefill.kv_cache_dtype != decode.kv_cache_dtype:
        out.append(Refusal("disaggregation/common/conn.py (prefill server info check)",
                           release.message("kv_cache_dtype", prefill=prefill.kv_cache_dtype,
                                           decode=decode.kv_cache_dtype)))
    if not (decode.pp == prefill.pp or decode.pp == 1):
        out.append(Refusal("disaggregation/common/conn.py _resolve_rank_mapping",
                           release.message("pp", prefill=prefill.pp, decode=decode.pp)))
    hetero = prefill.tp != decode.tp
    if backend == MOONCAKE and hetero and (prefill.unified_memory or decode.unified_memory):
        out.append(Refusal("disaggregation/mooncake/conn.py (unified-memory KV check)",
                           release.message("unified_memory", prefill=prefill.tp, decode=decode.tp)))
    if hetero and prefill.replicated_state and backend == NIXL:
        out.append(Refusal("disaggregation/nixl/conn.py (the MAMBA state send)", release.message("nixl_replicated")))
    elif hetero and prefill.qsa_state and backend == NIXL:
        out.append(Refusal("disaggregation/nixl/conn.py (the QSA_PENDING state send)",
                           release.message("nixl_qsa")))
    elif hetero and (prefill.replicated_state or prefill.qsa_state) and max(prefill.tp, decode.tp) % min(
            prefill.tp, decode.tp):
        out.append(Refusal("disaggregation/utils.py should_send_replicated_state",
                           release.message("replicated_divide", prefill=prefill.tp, decode=decode.tp)))
    if prefill.qsa_state and decode.qsa_state and prefill.qsa_page_bytes != decode.qsa_page_bytes:
        where = ("disaggregation/nixl/conn.py _send_kvcache_generic" if backend == NIXL else
                 "disaggregation/mooncake/conn.py _state_stride_mismatch (the decode peer's registration)")
        out.append(Refusal(where, release.message("qsa_item_len", prefill=prefill.qsa_page_bytes,
                                                  decode=decode.qsa_page_bytes)))
    return tuple(out)
