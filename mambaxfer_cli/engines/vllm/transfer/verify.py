"""D's page check: every byte of every page against what the plan says it must hold
(docs/execute.md, "Verification"); a wrong byte is located as ``check`` locates it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from mambaxfer_cli.engines.vllm.transfer.whole_pages import WholePage, SidePages
from mambaxfer_cli.engines.vllm.transfer.tasks import DecodeTask
from mambaxfer_cli.engines.vllm.proof.addresses import addresses
from mambaxfer_cli.proof.pattern import POISON, page, part_bytes
from mambaxfer_cli.engines.vllm.proof.simulate import ByteSource, WrongByte
from mambaxfer_cli.execute.results import Tally

STRAY = "outside the request"
Tick = Callable[[str], None]


@dataclass(frozen=True)
class StrayByte:
    """A byte that had to stay poisoned (outside the request, or page padding) but changed."""

    space: str
    tensor: int
    block: int
    offset: int
    found: int

    def describe(self, d_rank: int) -> str:
        place = f"tensor {self.tensor} block {self.block}"
        return (f"D{d_rank} {place} byte {self.offset} must stay poisoned (0x{POISON:02x}) "
                f"but holds 0x{self.found:02x}")


@dataclass
class PageCheck:
    """What a D rank's memory holds against the plan: bytes checked, wrong ones per region, and the
    first wrong byte of each, located."""

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

    def count(self, region: str, wrong: np.ndarray) -> int | None:
        """Counts the bytes ``wrong`` marks against ``region``; the (flat) index of the first, None if none."""
        n = int(np.count_nonzero(wrong))
        if not n:
            return None
        self.wrong_by_region[region] = self.wrong_by_region.get(region, 0) + n
        return int(np.argmax(wrong))

    def lines(self) -> list[str]:
        """Per wrong region: how many bytes, why (as check says it), and its first wrong byte."""
        out = [f"{region}: {self.wrong_by_region[region]} bytes wrong, {first.reason}; first: {first.describe()}"
               for region, first in self.first_by_region.items()]
        if self.first_stray is not None:
            stray = sum(n for region, n in self.wrong_by_region.items() if region not in self.first_by_region)
            out.append(f"{stray} bytes that must stay poisoned changed; first: "
                       f"{self.first_stray.describe(self.d_rank)}")
        return out

    def tally(self) -> Tally:
        return Tally(self.checked_bytes, self.wrong_bytes)

    def to_dict(self) -> dict[str, Any]:
        stray = self.first_stray
        return {"ok": self.ok, "checked_bytes": self.checked_bytes, "wrong_bytes": self.wrong_bytes,
                "wrong_by_region": dict(self.wrong_by_region),
                "first_wrong_byte": self.first.to_dict() if self.first else None,
                "first_wrong_by_region": {r: w.to_dict() for r, w in self.first_by_region.items()},
                "first_stray_byte": dict(vars(stray), description=stray.describe(self.d_rank)) if stray else None,
                "explanation": self.lines()}


def _source(task: DecodeTask, tensor: int, block: int, offset: int) -> ByteSource | None:
    """The P byte the plan's descriptor pairs copy to this D byte (the last pair that covers it)."""
    found = None
    page = task.memory.page_bytes
    at = block * page + offset
    for read in task.reads:
        l_tensor, l_addr, l_size = addresses(read.local, read.local_ids, page)
        hit = np.flatnonzero((l_tensor == tensor) & (l_addr <= at) & (at < l_addr + l_size))
        if hit.size:
            i = int(hit[-1])
            p_page = task.prefill_memory.page_bytes
            r_tensor, r_addr, _ = addresses(read.remote, read.remote_ids[i:i + 1], p_page)
            p_at = int(r_addr[0]) + at - int(l_addr[i])
            p_tensor, (p_block, p_offset) = int(r_tensor[0]), divmod(p_at, p_page)
            shape = task.prefill_pages[read.p_rank][p_tensor][p_block]
            kind = "attention" if any(part.block is not None for part in shape.parts) else "ssm"
            found = ByteSource(read.p_rank, kind, p_tensor, p_block, p_offset, shape.describe(p_offset))
    return found


def _side_source(side: SidePages, page_: WholePage, offset: int) -> tuple[ByteSource | None, int]:
    """The P byte a set's reads copy to this D byte (the last read that covers it), and how many do."""
    found, writes = None, 0
    p_lists = side.prefill_lists
    for read in side.reads:
        for local, remote in zip(read.local_ids, read.remote_ids):
            if side.lists.locate(local) != (page_.region, page_.block):
                continue
            writes += 1
            p_region, p_block = p_lists.locate(remote)
            p_layer = p_lists.layers[p_region - p_lists.first_region]
            found = ByteSource(read.p_rank, p_lists.space, p_layer, p_block, offset, p_lists.describe(offset))
    return found, writes


def _check_side_page(check: PageCheck, task: DecodeTask, side: SidePages, page_: WholePage, row: np.ndarray) -> None:
    """One D page of a set: the kept bytes of every unit against the pattern (region ``ple``, ``ring``
    or ``ckey``), every other byte against P's page at the same offset (``ple page``, ...)."""
    d_lists, p_lists = side.lists, side.prefill_lists
    space = d_lists.space
    p_page = page(p_lists.shape(page_.layer_index), p_lists.region(page_.layer_index), page_.p_block)
    want = np.full(row.size, POISON, dtype=np.uint8)
    n = min(row.size, p_page.size)
    want[:n] = p_page[:n]
    channels, unit = d_lists.channels, d_lists.unit_bytes
    part = d_lists.shape(page_.layer_index).parts[0]
    cells = want[:channels * unit].reshape(channels, unit)
    cells[:, :page_.keep] = part_bytes(*part.key(page_.region, page_.p_block), part)[:, :page_.keep]
    kept = np.zeros(row.size, dtype=bool)
    kept[:channels * unit].reshape(channels, unit)[:, :page_.keep] = True
    wrong = row != want
    for region, mask in ((space, kept), (f"{space} page", ~kept)):
        offset = check.count(region, wrong & mask)
        if offset is not None and region not in check.first_by_region:
            source, writes = _side_source(side, page_, offset)
            wants = (d_lists if region == space else p_lists).describe(offset)
            check.first_by_region[region] = WrongByte(
                task.rank, space, d_lists.layers[page_.layer_index], page_.block, page_.p_block, offset, wants,
                int(want[offset]), int(row[offset]), writes if source else 0, source)


CHUNK_BYTES = 64 << 20     # memory that must hold poison is compared with it this many bytes at a time


def _check_tensor(check: PageCheck, task: DecodeTask, tensor: int, got: np.ndarray, tick: Tick) -> None:
    """Page by page (never a copy of the whole tensor): the request's pages against what they must
    hold, every other page against poison."""
    pages = [e for e in task.expected if e.tensor == tensor]
    side = next((s for s in task.sides if any(p.region == tensor for p in s.pages)), None)
    whole = [p for p in side.pages if p.region == tensor] if side else []
    check.checked_bytes += got.size
    where = (f"tensor {tensor + 1} of {task.memory.tensors}" if tensor < task.memory.tensors
             else f"region {tensor + 1} of {len(task.memory.region_shapes)}")
    strays: list[tuple[int, int]] = []          # (block, offset) of the first stray byte found
    for e in pages:
        row = got[e.block]
        state = e.shape.state_bytes
        want = page(e.shape, tensor, e.p_block)[:state]
        wrong = row[:state] != want
        for part in e.shape.parts:
            at = check.count(part.region, wrong[part.offset:part.end])
            if at is not None and part.region not in check.first_by_region:
                offset = part.offset + at
                source = _source(task, tensor, e.block, offset)
                check.first_by_region[part.region] = WrongByte(
                    task.rank, e.kind, tensor, e.block, e.p_block, offset, e.shape.describe(offset),
                    int(want[offset]), int(row[offset]), 1 if source else 0, source)
        at = check.count("padding", row[state:] != POISON)
        if at is not None:
            strays.append((e.block, state + at))
        tick(f"{where}, request page {e.block}")
    for p in whole:
        assert side is not None
        _check_side_page(check, task, side, p, got[p.block])
        tick(f"{where}, {side.lists.space} page {p.block}")
    requested = np.zeros(got.shape[0], dtype=bool)
    requested[[e.block for e in pages] + [p.block for p in whole]] = True
    outside = np.flatnonzero(~requested)
    step = max(1, CHUNK_BYTES // max(got.shape[1], 1))
    first_outside = None
    for at in range(0, len(outside), step):
        blocks = outside[at:at + step]
        found = check.count(STRAY, got[blocks] != POISON)
        if found is not None and first_outside is None:      # blocks ascend: the first chunk with a stray has the first
            row, offset = divmod(found, got.shape[1])
            first_outside = (int(blocks[row]), offset)
            strays.append(first_outside)
        tick(f"{where}, other pages {min(at + step, len(outside))} of {len(outside)}")
    if check.first_stray is None and strays:
        block, offset = min(strays)
        check.first_stray = StrayByte("page", tensor, block, offset, int(got[block, offset]))


def verify_decode(task: DecodeTask, tensors: Sequence[np.ndarray], tick: Tick = lambda detail: None) -> PageCheck:
    """Check D's memory: ``tensors[t]`` is ``(logical_blocks, page_bytes)``, uint8 host arrays;
    ``tick`` hears how far the check got (a long check is progress, not a hang)."""
    check = PageCheck(task.rank)
    for tensor, got in enumerate(tensors):
        _check_tensor(check, task, tensor, got, tick)
    return check
