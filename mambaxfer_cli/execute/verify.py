"""D's verdict: every byte of every page and slot against what the plan says it must hold.

A D page paired with P block ``b`` must hold SPEC section 6's pattern of D's own layout for
``(tensor, b)`` up to ``state_bytes`` and poison after it (padding is never read); a page or slot
outside the request must still be all poison. The first wrong byte is located the way ``check``
reports it: D rank, region, unit, and which P rank and offset the plan read it from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np

from mambaxfer_cli.descriptors import ATTENTION_HEAD_BYTES
from mambaxfer_cli.execute.tasks import DecodeTask
from mambaxfer_cli.layout import RankLayout
from mambaxfer_cli.pattern import POISON, kv_pattern, page


@dataclass(frozen=True)
class WrongByte:
    d_rank: int
    memory: str                 # "ssm tensor 2" or "attention stream 0"
    d_block: int                # logical block (SSM) or kernel block (attention) on D
    p_block: int | None         # its pair in the request, None when outside the request
    offset: int                 # in the D page or slot
    region: str                 # x/B/C/Q/K/V/ssm, "kv", or "padding"
    unit: int | None            # global unit (channel, head) of that region
    unit_byte: int | None
    expected: int
    got: int
    p_rank: int | None          # where the plan read this byte from
    p_offset: int | None        # in that P rank's page or slot
    p_holds: str | None         # what the P bytes there are, e.g. "ssm[0] byte 4"

    def describe(self) -> str:
        where = (f"D{self.d_rank} {self.memory}, D block {self.d_block}"
                 + (f" (paired with P block {self.p_block})" if self.p_block is not None
                    else " (outside the request: must stay poisoned)"))
        what = f"byte {self.offset}" + (
            f" = {self.region}[{self.unit}] byte {self.unit_byte}" if self.unit is not None else f" ({self.region})")
        source = (f"; read from P{self.p_rank} offset {self.p_offset}, which holds {self.p_holds}"
                  if self.p_rank is not None else "; no read of the plan writes this byte")
        return f"{where}: {what}: expected 0x{self.expected:02x}, got 0x{self.got:02x}{source}"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Verdict:
    checked_bytes: int = 0
    wrong_bytes: int = 0
    wrong_by_region: dict[str, int] = field(default_factory=dict)
    first: WrongByte | None = None

    @property
    def ok(self) -> bool:
        return self.wrong_bytes == 0

    def _add(self, region: str, count: int) -> None:
        if count:
            self.wrong_by_region[region] = self.wrong_by_region.get(region, 0) + count
            self.wrong_bytes += count

    def to_dict(self) -> dict:
        return {"ok": self.ok, "checked_bytes": self.checked_bytes, "wrong_bytes": self.wrong_bytes,
                "wrong_by_region": dict(self.wrong_by_region),
                "first_wrong_byte": self.first.to_dict() if self.first else None}


def _p_holds(layout: RankLayout, page_bytes: int, offset: int) -> str:
    region = layout.region_at(offset)
    if region is None:
        return "P's page padding" if offset < page_bytes else "bytes beyond P's page"
    unit, byte = divmod(offset - region.offset, region.unit_bytes)
    return f"{region.name}[{region.shard.start + unit}] byte {byte}"


def _ssm_source(task: DecodeTask, offset: int) -> tuple[int | None, int | None, str | None]:
    for read in task.segments:
        for seg in read.segments:
            if seg.local_offset <= offset < seg.local_offset + seg.size:
                remote = seg.remote_offset + offset - seg.local_offset
                return read.p_rank, remote, _p_holds(task.prefill_layouts[read.p_rank],
                                                      task.prefill_memory.page_bytes, remote)
    return None, None, None


def _kv_source(task: DecodeTask, offset: int) -> tuple[int | None, int | None, str | None]:
    for read in task.reads:
        start, size = read.local.attention
        if read.attention and start <= offset < start + size:
            remote = read.remote.attention[0] + offset - start
            head, byte = divmod(remote, ATTENTION_HEAD_BYTES)
            first = task.prefill_kv[read.p_rank].start if task.prefill_kv[read.p_rank] else 0
            return read.p_rank, remote, f"kv[{first + head}] byte {byte}"
    return None, None, None


def _first_wrong(wrong: np.ndarray, got: np.ndarray, expected: np.ndarray) -> tuple[int, int, int, int] | None:
    rows = np.flatnonzero(wrong.any(axis=1))
    if not rows.size:
        return None
    row = int(rows[0])
    col = int(np.flatnonzero(wrong[row])[0])
    return row, col, int(expected[row, col]), int(got[row, col])


def _expected(shape: tuple[int, int], pairs: np.ndarray, fill) -> np.ndarray:
    out = np.full(shape, POISON, dtype=np.uint8)
    for d_block, p_block in pairs:
        content = fill(int(p_block))
        out[d_block, :content.shape[0]] = content
    return out


def verify_decode(task: DecodeTask, ssm: Sequence[np.ndarray], attention: Sequence[np.ndarray]) -> Verdict:
    """Check D's memory: ``ssm[t]`` is ``(logical_blocks, page_bytes)``, ``attention[f]``
    ``(kernel_blocks, slot_bytes)``, both uint8 host arrays."""
    verdict = Verdict()
    layout = task.layout
    pair_of = {int(d): int(p) for d, p in task.ssm_pairs}
    bounds = [(r.name, r.offset, r.end) for r in layout.regions] + [("padding", layout.state_bytes, None)]
    for tensor, got in enumerate(ssm):
        expected = _expected(got.shape, task.ssm_pairs,
                             lambda b, t=tensor: page(layout, t, b, layout.state_bytes))
        wrong = got != expected
        verdict.checked_bytes += got.size
        requested = np.zeros(got.shape[0], dtype=bool)
        requested[task.ssm_pairs[:, 0]] = True
        for name, start, end in bounds:
            verdict._add(name, int(np.count_nonzero(wrong[requested, start:end])))
        verdict._add("outside the request", int(np.count_nonzero(wrong[~requested])))
        hit = _first_wrong(wrong, got, expected) if verdict.first is None else None
        if hit:
            row, col, want, have = hit
            region = layout.region_at(col)
            unit = byte = None
            if region is not None:
                unit, byte = divmod(col - region.offset, region.unit_bytes)
                unit += region.shard.start
            source = _ssm_source(task, col) if row in pair_of else (None, None, None)
            verdict.first = WrongByte(task.rank, f"ssm tensor {tensor}", row, pair_of.get(row), col,
                                      region.name if region else "padding", unit, byte, want, have, *source)
    kv = task.kv_heads
    kernel_pair = {int(d): int(p) for d, p in task.attention_pairs}
    for stream, got in enumerate(attention):
        if kv is not None:
            expected = _expected(got.shape, task.attention_pairs,
                                 lambda b, f=stream: kv_pattern(f, b, kv.start, len(kv), ATTENTION_HEAD_BYTES))
        else:
            expected = np.full(got.shape, POISON, dtype=np.uint8)
        wrong = got != expected
        verdict.checked_bytes += got.size
        requested = np.zeros(got.shape[0], dtype=bool)
        requested[task.attention_pairs[:, 0]] = True
        verdict._add("kv", int(np.count_nonzero(wrong[requested])))
        verdict._add("outside the request", int(np.count_nonzero(wrong[~requested])))
        hit = _first_wrong(wrong, got, expected) if verdict.first is None else None
        if hit:
            row, col, want, have = hit
            head, byte = divmod(col, ATTENTION_HEAD_BYTES)
            source = _kv_source(task, col) if row in kernel_pair else (None, None, None)
            verdict.first = WrongByte(task.rank, f"attention stream {stream}", row, kernel_pair.get(row), col,
                                      "kv", (kv.start if kv else 0) + head, byte, want, have, *source)
    return verdict
