"""Where a prepared list's descriptors point in vLLM's memory, vectorised with numpy, and the whole
list as the rows NIXL takes (docs/reference.md §4); ``plan`` never imports it (nor numpy)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import numpy.typing as npt

from mambaxfer_cli.engines.vllm.descriptors import DescriptorList

Ids = npt.ArrayLike      # descriptor IDs: an array('q') of a plan, a numpy array, a list


def resolve(dlist: DescriptorList, ids: Ids) -> dict[str, np.ndarray]:
    """What each ID points at. ``attention`` rows give stream, kernel block and piece; the others
    SSM tensor, region and logical block."""
    ids = np.asarray(ids, dtype=np.int64)
    eng = dlist.engine
    is_attn = ids < dlist.attention_descs
    ssm = np.where(is_attn, 0, ids - dlist.attention_descs)
    q, block = np.divmod(ssm, eng.logical_blocks)
    tensor, region = np.divmod(q, max(dlist.k, 1))
    attn = np.where(is_attn, ids, 0)
    stream, rest = np.divmod(attn, eng.num_blocks * dlist.pieces)
    attn_block, piece = np.divmod(rest, dlist.pieces)
    offsets = np.array([o for o, _ in dlist.regions] or [0], dtype=np.int64)
    sizes = np.array([s for _, s in dlist.regions] or [0], dtype=np.int64)
    a_off = np.array([o for o, _ in dlist.attention], dtype=np.int64)
    a_size = np.array([s for _, s in dlist.attention], dtype=np.int64)
    region = np.clip(region, 0, max(dlist.k - 1, 0))
    return {
        "attention": is_attn,
        "tensor": np.where(is_attn, stream, tensor),
        "block": np.where(is_attn, attn_block, block),
        "region": np.where(is_attn, -1, region),
        "piece": np.where(is_attn, piece, -1),
        "offset": np.where(is_attn, a_off[piece], offsets[region]),
        "size": np.where(is_attn, a_size[piece], sizes[region]),
    }


def read_bytes(dlist: DescriptorList, ids: Ids) -> int:
    """The bytes the IDs' descriptors hold together."""
    return int(resolve(dlist, ids)["size"].sum())


def addresses(dlist: DescriptorList, ids: Ids, page_bytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(KV-cache tensor, byte offset in it, size) of each ID, in vLLM's shared memory."""
    r = resolve(dlist, ids)
    eng = dlist.engine
    kernel = page_bytes // eng.blocks_per_logical
    spt = eng.streams_per_tensor
    tensor = np.where(r["attention"], r["tensor"] // spt, r["tensor"])
    attn = r["block"] * kernel + (r["tensor"] % spt) * (kernel // spt) + r["offset"]
    ssm = r["block"] * page_bytes + r["offset"]
    return tensor, np.where(r["attention"], attn, ssm), r["size"]


def _row_sets(dlist: DescriptorList, bases: Sequence[int], page_bytes: int,
              dev_id: int) -> tuple[np.ndarray, np.ndarray]:
    """The list's strided rows (address, length, device, stride, count): ``(streams, pieces, 5)``
    for attention, each standing for its kernel blocks, and ``(tensors·k, 5)`` for the SSM regions."""
    eng = dlist.engine
    kernel = page_bytes // eng.blocks_per_logical
    spt = eng.streams_per_tensor
    base = np.asarray(bases, dtype=np.uint64)
    streams = np.arange(eng.attention_streams, dtype=np.uint64)
    stream_base = base[streams // np.uint64(spt)] + (streams % np.uint64(spt)) * np.uint64(kernel // spt)
    attn = np.empty((eng.attention_streams, dlist.pieces, 5), dtype=np.uint64)
    attn[..., 0] = stream_base[:, None] + np.array([o for o, _ in dlist.attention], dtype=np.uint64)[None, :]
    attn[..., 1] = np.array([s for _, s in dlist.attention], dtype=np.uint64)[None, :]
    attn[..., 3], attn[..., 4] = kernel, eng.num_blocks
    offsets = np.array([o for o, _ in dlist.regions], dtype=np.uint64)
    sizes = np.array([z for _, z in dlist.regions], dtype=np.uint64)
    ssm = np.empty((eng.ssm_tensors, dlist.k, 5), dtype=np.uint64)
    ssm[..., 0] = base[:eng.ssm_tensors, None] + offsets[None, :]
    ssm[..., 1] = sizes[None, :]
    ssm[..., 3], ssm[..., 4] = page_bytes, eng.logical_blocks
    attn[..., 2], ssm[..., 2] = dev_id, dev_id
    return attn, ssm.reshape(-1, 5)


def address_table(dlist: DescriptorList, bases: Sequence[int], page_bytes: int, dev_id: int = 0) -> np.ndarray:
    """The whole list as an ``(length, 3)`` uint64 array of (address, length, device)."""
    attn, ssm = _row_sets(dlist, bases, page_bytes, dev_id)
    shape = (dlist.engine.attention_streams, dlist.pieces, dlist.engine.num_blocks, 3)
    pieces_last = expand(attn.reshape(-1, 5)).reshape(shape).transpose(0, 2, 1, 3)   # IDs run piece-minor
    return np.concatenate([pieces_last.reshape(-1, 3), expand(ssm)])


def strided(dlist: DescriptorList, bases: Sequence[int], page_bytes: int, dev_id: int = 0) -> np.ndarray | None:
    """The list in NIXL 1.5's ``(rows, 5)`` form, numbered as ``address_table`` numbers it; None where
    it does not fit (several pieces per kernel block, whose IDs run piece-minor)."""
    if dlist.pieces != 1:
        return None
    attn, ssm = _row_sets(dlist, bases, page_bytes, dev_id)
    out = np.concatenate([attn.reshape(-1, 5), ssm])
    rows: np.ndarray = out[out[:, 4] > 0]
    return rows


def nixl_rows(dlist: DescriptorList, bases: Sequence[int], page_bytes: int, dev_id: int = 0) -> np.ndarray:
    """What ``prep_xfer_dlist`` gets: the strided form where it fits (fewer rows), else the table."""
    rows = strided(dlist, bases, page_bytes, dev_id)
    return rows if rows is not None else address_table(dlist, bases, page_bytes, dev_id)


def expand(rows: np.ndarray) -> np.ndarray:
    """An ``(N, 5)`` strided list as the ``(M, 3)`` list it stands for."""
    counts = rows[:, 4].astype(np.int64)
    index = np.repeat(np.arange(rows.shape[0]), counts)
    step = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    out = np.empty((index.size, 3), dtype=np.uint64)
    out[:, 0] = rows[index, 0] + step.astype(np.uint64) * rows[index, 3]
    out[:, 1], out[:, 2] = rows[index, 1], rows[index, 2]
    return out

