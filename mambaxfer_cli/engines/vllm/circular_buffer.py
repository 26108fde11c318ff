"""vLLM's ``CircularBufferSpec`` caches: one block of a few token slots per request, written in
place (``pos % ring``), which a CSA-linear NIXL worker moves whole. Two models keep one beside
their attention: Qwen4Exp's QSA raw-key ring and GLM-5-Next's kpool tail ring. What the ring
holds, how large it is, and the checks vLLM makes of it, each with the vLLM function it follows.
"""

from __future__ import annotations

import math

from mambaxfer_cli.planning.dtypes import dtype_bytes


def qsa_ring_tokens(compress_ratio: int, num_spec: int) -> int:
    """Qwen4Exp (``QSARawKeyCache.get_kv_cache_spec``): the open group plus every row a
    speculative step stores, rounded up to whole groups."""
    return math.ceil((compress_ratio + num_spec) / compress_ratio) * compress_ratio


def glm5next_ring_tokens(index_kpool: int, num_spec: int) -> int:
    """GLM-5-Next (``Glm5NextTailCache.get_kv_cache_spec``): the in-progress pool plus the
    speculative rows, in a power-of-two number of pools (``next_power_of_2``)."""
    pools = math.ceil((index_kpool + num_spec) / index_kpool)
    return index_kpool * (1 << (pools - 1).bit_length())


def glm5next_slot_bytes(index_head_dim: int) -> int:
    """One slot of GLM-5-Next's tail ring: ``CircularBufferSpec(num_kv_heads=2,
    head_size=index_head_dim, head_size_v=0, bfloat16)``, its two head slots the raw key and the
    gate score."""
    return 2 * index_head_dim * dtype_bytes("bfloat16")


def glm5next_ring_bytes(index_kpool: int, index_head_dim: int, num_spec: int) -> int:
    """GLM-5-Next's tail ring page: ``glm5next_ring_tokens`` slots."""
    return glm5next_ring_tokens(index_kpool, num_spec) * glm5next_slot_bytes(index_head_dim)


def ring_refusal(block_size: int, ring: int, who: str) -> str | None:
    """Both rings assert that they divide the attention block (the model's block size joins no
    LCM with them: ``NixlBaseConnectorWorker.__init__`` leaves ``CircularBufferSpec`` groups out
    of the transfer block size). None where it divides."""
    if block_size % ring:
        return (f"vLLM does not start this engine: the {who} ring of {ring} tokens does not divide the "
                f"attention block of {block_size} tokens (AssertionError in get_kv_cache_spec).")
    return None


def csa_linear_refusal(total_kv_heads: int, local_tp: int, remote_tp: int) -> str | None:
    """``_validate_csa_linear_tp_layout`` (run first in ``_nixl_handshake`` by a worker holding a
    ``CircularBufferSpec`` group): both engines on the same side of the model's KV-head count."""
    if total_kv_heads and (local_tp < total_kv_heads) != (remote_tp < total_kv_heads):
        return (f"CSA-linear NIXL requires both endpoints on the same side of the KV-head sharding "
                f"boundary ({total_kv_heads} KV heads): got local TP {local_tp}, remote TP {remote_tp}.")
    return None
