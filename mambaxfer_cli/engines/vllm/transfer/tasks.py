"""What each rank process of an execute run does, derived from a plan (pure: no torch, no NIXL);
its memory is vLLM's, as docs/execute.md lays it out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from mambaxfer_cli.engines.vllm.descriptors import DescriptorRead
from mambaxfer_cli.engines.vllm.engine import EngineLayout
from mambaxfer_cli.execute.tasks import Memory, RankTask, RunSettings, available_memory, gib, unexecutable
from mambaxfer_cli.engines.vllm.transfer.whole_pages import PageLists, SidePages, side_lists, side_pages
from mambaxfer_cli.planning.layout import RankLayout
from mambaxfer_cli.engines.vllm.proof.pages import (
    ATTENTION_PAGE, ExpectedPage, p_page_kinds, p_page_shape, request_pages,
)
from mambaxfer_cli.proof.pattern import PageShape
from mambaxfer_cli.engines.vllm.plan import Plan
from mambaxfer_cli.engines.vllm.proof.addresses import addresses
from mambaxfer_cli.engines.vllm.proof.simulate import id_problems

INT32_MAX = 2**31 - 1
FEWER_BLOCKS = "use fewer --blocks or --layers (or plan with fewer --p-num-blocks/--d-num-blocks)"


@dataclass(frozen=True)
class PrefillTask(RankTask):
    consumers: tuple[int, ...]   # D ranks that READ from this rank
    pages: tuple[tuple[PageShape, ...], ...] = ()   # what each page of each region holds

    @property
    def program(self) -> str:
        return program(self, "prefill")


@dataclass(frozen=True)
class DecodeTask(RankTask):
    reads: tuple[DescriptorRead, ...]       # this D rank's reads, one per source P rank
    prefill_layouts: tuple[RankLayout, ...]
    prefill_memory: Memory
    prefill_pages: tuple[tuple[tuple[PageShape, ...], ...], ...]   # per P rank, tensor, page
    expected: tuple[ExpectedPage, ...]      # the request's pages on D and what each must hold
    sides: tuple[SidePages, ...] = ()       # Qwen4Exp: its whole pages, appended to the reads' lists

    @property
    def sources(self) -> tuple[int, ...]:
        return tuple(r.p_rank for r in self.reads)

    @property
    def program(self) -> str:
        return program(self, "decode")


def program(task: RankTask, role: str) -> str:
    """execute's rank program of ``role`` (prefill, decode), or bench's in a bench run."""
    if task.settings.bench is not None:
        return f"mambaxfer_cli.engines.vllm.transfer.bench_rank:bench_{role}"
    return f"mambaxfer_cli.engines.vllm.transfer.rank:{role}"


@dataclass(frozen=True)
class BenchSpec:
    """What every rank of a bench run needs besides its own task: each variant's reads per D rank,
    and each variant's D tasks (what D must hold after it)."""

    iters: int
    variants: tuple[tuple[str, dict[int, tuple[DescriptorRead, ...]]], ...]   # (variant, {d_rank: reads})
    decode_tasks: dict[str, dict[int, DecodeTask]]                             # variant -> {d_rank: task}
    order: tuple[str, ...]                                                     # the variants run in this order


def side_memory(side: EngineLayout, sets: Sequence[PageLists] = ()) -> Memory:
    return Memory(side.lists.tensors, side.lists.logical_blocks, side.page_bytes,
                  side_regions=tuple((len(s.layers), s.page_bytes) for s in sets))


def plan_memory(plan: Plan, ple: bool = True) -> tuple[Memory, Memory]:
    """P's and D's memory: the KV-cache tensors, and the regions of the whole pages that move
    (``ple``: False for none)."""
    sets = side_lists(plan) if ple else ()
    return (side_memory(plan.prefill, [p for p, _ in sets]), side_memory(plan.decode, [d for _, d in sets]))


def prefill_pages(plan: Plan, rank: int, sets: Sequence[PageLists] = ()) -> tuple[tuple[PageShape, ...], ...]:
    """What P rank ``rank`` keeps in every page of every tensor (and region of whole pages)."""
    kinds = p_page_kinds(plan)
    blocks = plan.prefill.lists.logical_blocks
    tensors = tuple(tuple(p_page_shape(plan, rank, tensor, block, kinds) for block in range(blocks))
                    for tensor in range(plan.prefill.lists.tensors))
    return tensors + tuple((s.shape(j),) * blocks for s in sets for j in range(len(s.layers)))


def _check_twice(expected: list[ExpectedPage]) -> None:
    seen: set[tuple[int, int]] = set()
    for page in expected:
        if page.key in seen:
            what = "attention" if page.kind == ATTENTION_PAGE else "SSM"
            raise unexecutable(f"D logical block {page.block} ({what}) is written by the request more than "
                                f"once, so the bytes it ends with are not defined")
        seen.add(page.key)


def _check_ids(read: DescriptorRead, p_tp: int, d_tp: int, local: Memory, remote: Memory) -> None:
    """What NIXL would refuse: check's ID problems (repeated IDs aside), IDs beyond 32 bits, descriptors
    outside registered memory (one that overruns its page spills, as on an engine: D's check sees it)."""
    problem = next((p for p in id_problems(read, p_tp, d_tp) if p.code != "id-duplicate"), None)
    if problem is not None:
        raise unexecutable(problem.message)
    who = f"D{read.d_rank} <- P{read.p_rank} ({read.local_list})"
    for side, ids, dlist, memory in (("local", read.local_ids, read.local, local),
                                     ("remote", read.remote_ids, read.remote, remote)):
        if dlist.length > INT32_MAX:
            raise unexecutable(f"{who}: the {side} list has {dlist.length} descriptors, more than NIXL's "
                                f"32-bit descriptor IDs address")
        _, addr, size = addresses(dlist, ids, memory.page_bytes)
        outside = np.flatnonzero((addr < 0) | (addr + size > memory.logical_blocks * memory.page_bytes))
        if outside.size:
            raise unexecutable(f"{who}: {side} ID {int(ids[int(outside[0])])} points beyond the rank's registered "
                                f"memory ({outside.size} such IDs)")


def check_fits(plan: Plan, device: str, fix: str = FEWER_BLOCKS) -> None:
    """The engines' memory fits this machine: with DRAM, at most half of what is available (the
    ranks' own working memory and the rest of the machine keep the other half)."""
    p_memory, d_memory = plan_memory(plan)
    p_tp, d_tp = plan.prefill.tp, plan.decode.tp
    total = p_tp * p_memory.total_bytes + d_tp * d_memory.total_bytes
    free = available_memory()
    if device == "cpu" and free is not None and total > free // 2:
        raise unexecutable(
            f"its engines need {gib(total)} of DRAM over {p_tp + d_tp} ranks (P {gib(p_memory.total_bytes)}, "
            f"D {gib(d_memory.total_bytes)} each), more than half of the {gib(free)} available; {fix}")


def _check_side(d_rank: int, sets: tuple[SidePages, ...], plan_reads: tuple[DescriptorRead, ...]) -> None:
    """Each read of a set of whole pages rides on the plan's read from its P rank, with IDs inside
    both of the set's lists."""
    sources = {r.p_rank for r in plan_reads if r.d_rank == d_rank}
    for pages in sets:
        name = pages.lists.space.upper() if pages.lists.space == "ple" else f"indexer {pages.lists.space}"
        for read in pages.reads:
            if read.p_rank not in sources:
                raise unexecutable(f"D{d_rank} reads its {name} page from P{read.p_rank}, which it reads "
                                    f"nothing else from")
            for side, ids, dlist in (("local", read.local_ids, pages.lists),
                                     ("remote", read.remote_ids, pages.prefill_lists)):
                bad = next((i for i in ids if not 0 <= i < dlist.length), None)
                if bad is not None:
                    raise unexecutable(f"D{d_rank} <- P{read.p_rank}: {side} {name} ID {bad} is outside the "
                                        f"{dlist.length} descriptors of the {name} list")


def build_tasks(plan: Plan, settings: RunSettings, ple: bool = True) -> tuple[list[PrefillTask], list[DecodeTask]]:
    """Every rank's task; raises UserError when the plan cannot be executed as it stands. ``ple``:
    move Qwen4Exp's whole pages too (bench moves the plan's reads only)."""
    dm = plan.moved_descriptors
    p_tp, d_tp = plan.prefill.tp, plan.decode.tp
    p_memory, d_memory = plan_memory(plan, ple)
    expected = {d: request_pages(plan, d) for d in range(d_tp)}
    for pages in expected.values():
        _check_twice(pages)
    for read in dm.reads:
        _check_ids(read, p_tp, d_tp, d_memory, p_memory)
    sets = side_lists(plan) if ple else ()
    by_rank = {d: side_pages(plan, d) if ple else () for d in range(d_tp)}
    for d, sides in by_rank.items():
        _check_side(d, sides, dm.reads)

    check_fits(plan, settings.device)

    p_pages = tuple(prefill_pages(plan, r, [p for p, _ in sets]) for r in range(p_tp))
    prefill = [PrefillTask("P", r, settings, settings.dev(r), layout, p_memory,
                           consumers=tuple(sorted(read.d_rank for read in dm.reads if read.p_rank == r)),
                           pages=p_pages[r])
               for r, layout in enumerate(plan.prefill.ranks)]
    decode = [DecodeTask("D", d, settings, settings.dev(p_tp + d), layout, d_memory,
                         reads=tuple(r for r in dm.reads if r.d_rank == d),
                         prefill_layouts=plan.prefill.ranks, prefill_memory=p_memory, prefill_pages=p_pages,
                         expected=tuple(expected[d]), sides=by_rank[d])
              for d, layout in enumerate(plan.decode.ranks)]
    return prefill, decode
