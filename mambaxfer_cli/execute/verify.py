"""D's verdict: every byte of every page and slot against what the plan says it must hold.

A D page of the request, paired with P block ``b``, must hold SPEC section 6's pattern of D's own
layout for ``(tensor, b)`` up to its state's end and poison after it (padding is never read);
every other page and slot must still be all poison. A wrong byte of the request is located as
``check`` locates it (``simulate.WrongByte``): D rank, region, unit, and the P rank, block and
offset the plan's descriptor pair read it from, with what P keeps there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from mambaxfer_cli.execute.tasks import DecodeTask
from mambaxfer_cli.pattern import POISON, PageShape, page
from mambaxfer_cli.simulate import ATTENTION_SPACE, SPACE_NAMES, SSM_SPACE, ByteSource, WrongByte

STRAY = "outside the request"


@dataclass(frozen=True)
class StrayByte:
    """A byte that had to stay poisoned (outside the request, or page padding) but changed."""

    space: str
    tensor: int
    block: int
    offset: int
    found: int

    def describe(self, d_rank: int) -> str:
        place = (f"attention stream {self.tensor} kernel block {self.block}" if self.space == "attention"
                 else f"SSM tensor {self.tensor} block {self.block}")
        return (f"D{d_rank} {place} byte {self.offset} must stay poisoned (0x{POISON:02x}) "
                f"but holds 0x{self.found:02x}")


@dataclass
class Verdict:
    d_rank: int
    checked_bytes: int = 0
    wrong_by_region: dict[str, int] = field(default_factory=dict)
    first_by_region: dict[str, WrongByte] = field(default_factory=dict)   # state bytes of the request
    first_stray: StrayByte | None = None

    @property
    def wrong_bytes(self) -> int:
        return sum(self.wrong_by_region.values())

    @property
    def ok(self) -> bool:
        return self.wrong_bytes == 0

    @property
    def first(self) -> WrongByte | None:
        return next(iter(self.first_by_region.values()), None)

    def count(self, region: str, wrong: int) -> None:
        if wrong:
            self.wrong_by_region[region] = self.wrong_by_region.get(region, 0) + wrong

    def lines(self) -> list[str]:
        """Per wrong region: how many bytes, why (as check says it), and its first wrong byte."""
        out = [f"{region}: {self.wrong_by_region[region]} bytes wrong, {first.reason}; first: {first.describe()}"
               for region, first in self.first_by_region.items()]
        if self.first_stray is not None:
            stray = sum(n for region, n in self.wrong_by_region.items() if region not in self.first_by_region)
            out.append(f"{stray} bytes that must stay poisoned changed; first: "
                       f"{self.first_stray.describe(self.d_rank)}")
        return out

    def to_dict(self) -> dict:
        stray = self.first_stray
        return {"ok": self.ok, "checked_bytes": self.checked_bytes, "wrong_bytes": self.wrong_bytes,
                "wrong_by_region": dict(self.wrong_by_region),
                "first_wrong_byte": self.first.to_dict() if self.first else None,
                "first_wrong_by_region": {r: w.to_dict() for r, w in self.first_by_region.items()},
                "first_stray_byte": dict(vars(stray), description=stray.describe(self.d_rank)) if stray else None,
                "explanation": self.lines()}


def _source(task: DecodeTask, space: int, tensor: int, block: int, offset: int) -> ByteSource | None:
    """The P byte the plan's descriptor pairs copy to this D byte (the last pair that covers it)."""
    found = None
    for read in task.reads:
        local = read.local.resolve(read.local_ids)
        hit = np.flatnonzero((local["attention"] == (space == ATTENTION_SPACE)) & (local["tensor"] == tensor)
                             & (local["block"] == block) & (local["offset"] <= offset)
                             & (offset < local["offset"] + local["size"]))
        if hit.size:
            i = int(hit[-1])
            remote = {k: int(v[0]) for k, v in read.remote.resolve(read.remote_ids[i:i + 1]).items()}
            p_offset = remote["offset"] + offset - int(local["offset"][i])
            p_space = ATTENTION_SPACE if remote["attention"] else SSM_SPACE
            holds = task.prefill_shapes[read.p_rank][p_space].describe(p_offset)
            found = ByteSource(read.p_rank, SPACE_NAMES[p_space], remote["tensor"], remote["block"], p_offset, holds)
    return found


def _content(task: DecodeTask, space: int, tensor: int, p_block: int) -> np.ndarray:
    """The state bytes a D page (slot) paired with ``p_block`` must hold."""
    shape = task.shapes[space]
    return page(shape, tensor, p_block)[:shape.state_bytes]


def _check_region(verdict: Verdict, task: DecodeTask, space: int, tensor: int, got: np.ndarray) -> None:
    shape: PageShape = task.shapes[space]
    pairs = [(e.block, e.p_block) for e in task.expected if e.space == space and e.tensor == tensor]
    expected = np.full(got.shape, POISON, dtype=np.uint8)
    for block, p_block in pairs:
        content = _content(task, space, tensor, p_block)
        expected[block, :content.size] = content
    wrong = got != expected
    verdict.checked_bytes += got.size
    requested = np.zeros(got.shape[0], dtype=bool)
    requested[[block for block, _ in pairs]] = True
    for part in shape.parts:
        verdict.count(part.region, int(np.count_nonzero(wrong[requested, part.offset:part.end])))
    verdict.count("padding", int(np.count_nonzero(wrong[requested, shape.state_bytes:])))
    verdict.count(STRAY, int(np.count_nonzero(wrong[~requested])))
    if not wrong.any():
        return
    p_block_of = dict(pairs)
    for part in shape.parts:
        state = wrong[:, part.offset:part.end] & requested[:, None]
        if part.region in verdict.first_by_region or not state.any():
            continue
        block = next(b for b, _ in pairs if state[b].any())   # request order, as check reports
        offset = part.offset + int(np.flatnonzero(state[block])[0])
        source = _source(task, space, tensor, block, offset)
        verdict.first_by_region[part.region] = WrongByte(
            task.rank, SPACE_NAMES[space], tensor, block, p_block_of[block], offset, shape.describe(offset),
            int(expected[block, offset]), int(got[block, offset]), 1 if source else 0, source)
    stray = wrong.copy()
    stray[:, :shape.state_bytes] &= ~requested[:, None]
    if verdict.first_stray is None and stray.any():
        block = int(np.flatnonzero(stray.any(axis=1))[0])
        offset = int(np.flatnonzero(stray[block])[0])
        verdict.first_stray = StrayByte(SPACE_NAMES[space], tensor, block, offset, int(got[block, offset]))


def verify_decode(task: DecodeTask, ssm: Sequence[np.ndarray], attention: Sequence[np.ndarray]) -> Verdict:
    """Check D's memory: ``ssm[t]`` is ``(logical_blocks, page_bytes)``, ``attention[f]``
    ``(kernel_blocks, slot_bytes)``, uint8 host arrays."""
    verdict = Verdict(task.rank)
    for space, regions in ((SSM_SPACE, ssm), (ATTENTION_SPACE, attention)):
        for tensor, got in enumerate(regions):
            _check_region(verdict, task, space, tensor, got)
    return verdict
