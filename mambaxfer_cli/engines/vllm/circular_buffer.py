"""vLLM's ``CircularBufferSpec`` caches: one block of a few token slots per request, written in place
(``pos % ring``), which a CSA-linear NIXL worker moves whole; their sizes and vLLM's checks of them."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from mambaxfer_cli.engines.vllm.release import Refusal
from mambaxfer_cli.planning.dtypes import dtype_bytes


@dataclass(frozen=True)
class IndexerCaches:
    """One model's indexer caches: the ring's slots and the compressed keys' size."""

    indexer: str            # whose: "QSA", "GLM-5-Next indexer"
    ring_name: str          # "QSA raw-key ring", "kpool tail ring"
    ring_tokens: int
    ring_slot_bytes: int
    tokens_per_key: int     # compress_ratio, index_kpool
    key_bytes: int
    mla: bool               # the model's attention is MLA: one source, no head offset
    warning: str            # the plan's warning code for them
    layer_kind: str         # the layers that keep them, as the warning names them

    @property
    def ring_page_bytes(self) -> int:
        """``ring_tokens`` slots: every rank holds the same page."""
        return self.ring_tokens * self.ring_slot_bytes

    def key_page_bytes(self, block_size: int) -> int:
        """The compressed keys of one attention block of ``block_size`` tokens."""
        return block_size // self.tokens_per_key * self.key_bytes


def qsa_ring_tokens(compress_ratio: int, num_spec: int) -> int:
    """Qwen4Exp (``QSARawKeyCache.get_kv_cache_spec``): the open group plus every row a
    speculative step stores, rounded up to whole groups."""
    return math.ceil((compress_ratio + num_spec) / compress_ratio) * compress_ratio


def kpool_ring_tokens(index_kpool: int, num_spec: int) -> int:
    """GLM-5-Next (``Glm5NextTailCache.get_kv_cache_spec``): the in-progress pool plus the
    speculative rows, in a power-of-two number of pools (``next_power_of_2``)."""
    pools = math.ceil((index_kpool + num_spec) / index_kpool)
    return index_kpool * (1 << (pools - 1).bit_length())


def kpool_slot_bytes(index_head_dim: int) -> int:
    """One slot of GLM-5-Next's tail ring: two bfloat16 head slots of ``index_head_dim`` (the raw key,
    the gate score)."""
    return 2 * index_head_dim * dtype_bytes("bfloat16")


def ring_refusals(code: str, who: str, sides: Iterable[tuple[str, int, int | None]]) -> tuple[Refusal, ...]:
    """The engines (name, block tokens, ring tokens) whose ring does not divide the attention block:
    vLLM asserts it does (``NixlBaseConnectorWorker.__init__`` leaves rings out of its block LCM)."""
    return tuple(Refusal(code, f"{name}: vLLM does not start this engine: the {who} ring of {ring} tokens does not "
                               f"divide the attention block of {block} tokens (AssertionError in get_kv_cache_spec).")
                 for name, block, ring in sides if ring and block % ring)


def csa_linear_refusal(total_kv_heads: int, local_tp: int, remote_tp: int) -> str | None:
    """``_validate_csa_linear_tp_layout`` (run first in ``_nixl_handshake`` by a worker holding a
    ``CircularBufferSpec`` group): both engines on the same side of the model's KV-head count."""
    if total_kv_heads and (local_tp < total_kv_heads) != (remote_tp < total_kv_heads):
        return (f"CSA-linear NIXL requires both endpoints on the same side of the KV-head sharding "
                f"boundary ({total_kv_heads} KV heads): got local TP {local_tp}, remote TP {remote_tp}.")
    return None
