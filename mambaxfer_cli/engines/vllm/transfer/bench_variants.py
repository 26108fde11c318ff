"""What a bench run moves, apart from running it: its variants and directions, the ranks' tasks
(one registered region per rank), and the limit variant's chunks and check."""

from __future__ import annotations

from dataclasses import replace
from itertools import accumulate
from typing import Callable, Sequence

import numpy as np

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.engines.vllm.transfer.verify import CHUNK_BYTES
from mambaxfer_cli.execute.results import Tally
from mambaxfer_cli.engines.vllm.transfer.tasks import BenchSpec, DecodeTask, PrefillTask, build_tasks, side_memory
from mambaxfer_cli.execute.tasks import RunSettings
from mambaxfer_cli.engines.vllm.descriptors import DescriptorRead
from mambaxfer_cli.engines.vllm.plan import Plan
from mambaxfer_cli.engines.vllm.proof.addresses import read_bytes
from mambaxfer_cli.proof.pattern import POISON, fill_page

PLANNED, COALESCED, LIMIT = "planned", "coalesced", "limit"
ORDER = (PLANNED, COALESCED, LIMIT)
DIRECTIONS = ("READ", "WRITE")
MODES = {"READ": "pull (D READs)", "WRITE": "push (P WRITEs)"}


def limit_chunks(reads: Sequence[DescriptorRead]) -> list[tuple[int, int, int]]:
    """The limit variant of one D rank's reads: per source P rank (in read order), the D offset and
    the bytes the plan moves from it; one descriptor each, laid back to back in D's memory."""
    sizes: dict[int, int] = {}
    for read in reads:
        sizes[read.p_rank] = sizes.get(read.p_rank, 0) + read_bytes(read.local, read.local_ids)
    offsets = accumulate(sizes.values(), initial=0)
    return [(p_rank, offset, size) for (p_rank, size), offset in zip(sizes.items(), offsets)]


class _Flat:
    """D's regions (bench: one allocation, tensors back to back) as one run of bytes; a slice is
    a view inside one region, a copy across two."""

    def __init__(self, regions: Sequence[np.ndarray]) -> None:
        self.regions = [r.reshape(-1) for r in regions]
        self.starts = [0]
        for region in self.regions:
            self.starts.append(self.starts[-1] + region.size)

    @property
    def size(self) -> int:
        return self.starts[-1]

    def __getitem__(self, span: slice) -> np.ndarray:
        pieces = []
        for region, start in zip(self.regions, self.starts):
            lo, hi = max(span.start - start, 0), min(span.stop - start, region.size)
            if lo < hi:
                pieces.append(region[lo:hi])
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


def limit_check(task: DecodeTask, regions: Sequence[np.ndarray],
                tick: Callable[[str], None] = lambda detail: None) -> Tally:
    """D's memory after the limit variant: each chunk the first bytes of its P rank's memory, everything
    else poison; compared a page or CHUNK_BYTES at a time, never a copy of D's memory."""
    got = _Flat(regions)
    page = task.prefill_memory.page_bytes
    blocks = task.prefill_memory.logical_blocks
    want = np.empty(page, dtype=np.uint8)
    wrong = 0
    covered = []
    for p_rank, offset, size in limit_chunks(task.reads):
        covered.append((offset, offset + size))
        for row in range(-(-size // page)):
            tensor, block = divmod(row, blocks)
            fill_page(want, task.prefill_pages[p_rank][tensor][block], tensor, block)
            n = min(page, size - row * page)
            at = offset + row * page
            wrong += int(np.count_nonzero(got[at:at + n] != want[:n]))
            tick(f"P{p_rank}'s bytes, {min((row + 1) * page, size) >> 20} of {size >> 20} MiB")
    at = 0
    for lo, hi in [*sorted(covered), (got.size, got.size)]:
        for start in range(at, lo, CHUNK_BYTES):
            end = min(start + CHUNK_BYTES, lo)
            wrong += int(np.count_nonzero(got[start:end] != POISON))
            tick(f"poison, {end >> 20} of {got.size >> 20} MiB")
        at = hi
    return Tally(got.size, wrong)


def bench_tasks(planned: Plan, coalesced: Plan, settings: RunSettings) -> tuple[list[PrefillTask], list[DecodeTask]]:
    """The rank tasks of one bench run: the planned plan's ranks, with one registered region each."""
    for side in ("prefill", "decode"):
        if side_memory(getattr(planned, side)) != side_memory(getattr(coalesced, side)):
            raise UserError(f"the coalesced plan lays out the {side} engine's memory differently")
    prefill, decode = build_tasks(planned, settings, ple=False)      # bench times the plan's reads only
    _, decode_b = build_tasks(coalesced, settings, ple=False)
    for a, b in zip(decode, decode_b):
        if [e.key for e in a.expected] != [e.key for e in b.expected]:
            raise UserError(f"the coalesced plan moves other pages to D{a.rank} than the planned one")
    decode = [replace(t, memory=replace(t.memory, single_region=True),
                      prefill_memory=replace(t.prefill_memory, single_region=True)) for t in decode]
    spec = BenchSpec(settings.iters,
                     variants=((PLANNED, {t.rank: t.reads for t in decode}),
                               (COALESCED, {t.rank: t.reads for t in decode_b})),
                     decode_tasks={PLANNED: {t.rank: t for t in decode}, COALESCED: {t.rank: t for t in decode_b}},
                     order=ORDER)
    settings = replace(settings, bench=spec)
    return ([replace(t, settings=settings, memory=replace(t.memory, single_region=True)) for t in prefill],
            [replace(t, settings=settings) for t in decode])
