"""SGLang's state slot and its transfer entries (mem_cache/memory_pool.py ``MambaPool``).

The pool keeps one slot per request (not blocks): entry ``i`` is one state tensor of one layer,
``[size + 1, ...]``, and a request's bytes of it lie at ``ptr + item_len · slot``. The entries run
all conv tensors layer by layer, then all temporal ones (``_iter_transfer_state_entries``)."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any, Sequence

from mambaxfer_cli.engines.sglang.families import merged
from mambaxfer_cli.engines.sglang.shapes import StateShape
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.planning.dtypes import dtype_bytes

CONV = "conv"
TEMPORAL = "temporal"
FIELDS = (CONV, TEMPORAL)


@dataclass(frozen=True)
class TransferEntry:
    """One (state, layer) entry as SGLang registers it (``dim`` 0: an item replicated across
    attention TP)."""

    field: str
    layer_id: int
    item_len: int
    dim: int
    outer_count: int = 1
    conv_shard_groups: tuple[int, ...] | None = None

    @property
    def replicated(self) -> bool:
        return self.dim == 0

    def to_dict(self) -> dict[str, Any]:
        return vars(self) | {"conv_shard_groups": list(self.conv_shard_groups) if self.conv_shard_groups else None}


def entry_for(field: str, shape: StateShape, conv_dtype: str, ssm_dtype: str, layer_id: int = 0) -> TransferEntry:
    if field == CONV:
        return TransferEntry(CONV, layer_id, prod(shape.conv) * dtype_bytes(conv_dtype), shape.conv_dim,
                             shape.conv_outer, shape.conv_shard_groups)
    extra = {name: (dim, rows) for name, dim, rows in shape.extra}
    if field in extra:
        return TransferEntry(field, layer_id, extra[field][0] * extra[field][1] * dtype_bytes(conv_dtype),
                             extra[field][0])
    assert field == TEMPORAL, field
    return TransferEntry(TEMPORAL, layer_id, prod(shape.temporal) * dtype_bytes(ssm_dtype), shape.temporal[0])


def transfer_entries(shape: StateShape, conv_dtype: str, ssm_dtype: str,
                     layer_ids: Sequence[int]) -> tuple[TransferEntry, ...]:
    """Every entry of a rank's pool in SGLang's order (``get_contiguous_buf_infos``); a field
    with no elements (a short-conv layer's temporal state) is not advertised."""
    entries = (entry_for(field, shape, conv_dtype, ssm_dtype, layer_id) for field in shape.fields
               for layer_id in layer_ids)
    return tuple(entry for entry in entries if entry.item_len)


def side_entries(model: ModelSpec) -> tuple[TransferEntry, ...]:
    """The state a family's pool carries after its SSM entries, replicated across attention TP (a
    Qwen4Exp's PLE windows: ``MambaPool``'s slot siblings), per its SGLang family module."""
    hook = merged("SIDE_STATES").get(model.family)
    return tuple(TransferEntry(f, layer, size, 0) for f, layer, size in hook(model, model.conv_dtype)) if hook else ()


# --qsa-indexer-dtype as resolve_qsa_indexer_dtype (mem_cache/qsa_kv_pool.py) keeps the compressed keys.
QSA_INDEXER_DTYPES = {"auto": "bfloat16", "bfloat16": "bfloat16", "fp8_e4m3": "fp8_e4m3"}


def qsa_entries(model: ModelSpec, indexer_dtype: str = "bfloat16",
                draft_band: int | None = None) -> tuple[TransferEntry, ...]:
    """A QSA indexer's states (Qwen4Exp's ``QSATokenToKVPool``), replicated across attention TP: its
    QSA_PENDING entries, then its QSA_COMPRESSED ones, a draft's after the target's in each."""
    hook = merged("QSA_STATES").get(model.family)
    return tuple(TransferEntry(f, layer, size, 0) for f, layer, size in hook(model, indexer_dtype, draft_band)
                 ) if hook else ()


def beside_entries(model: ModelSpec, indexer_dtype: str = "bfloat16",
                   draft_band: int | None = None) -> tuple[TransferEntry, ...]:
    """Every replicated entry a side registers after its SSM ones: the pool's side states, then the
    QSA states."""
    return side_entries(model) + qsa_entries(model, indexer_dtype, draft_band)


def server_flags(model: ModelSpec, indexer_dtype: str = "bfloat16") -> dict[str, Any]:
    """What SGLang's senders check in ``model``'s state (``Server``'s flags): what they refuse across
    TP sizes, and the compressed QSA page both sides must keep alike."""
    qsa = qsa_entries(model, indexer_dtype)
    return {"replicated_state": bool(side_entries(model)), "qsa_state": bool(qsa),
            "qsa_page_bytes": qsa[-1].item_len if qsa else 0}
