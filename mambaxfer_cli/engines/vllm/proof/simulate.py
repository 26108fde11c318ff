"""Where bytes move without NIXL: a plan's descriptor IDs performed on numpy pages of vLLM's
registered memory, then proved byte by byte (docs/commands.md, "How the bytes are proved")."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from mambaxfer_cli.engines.vllm.descriptors import DescriptorList, DescriptorRead
from mambaxfer_cli.engines.vllm.proof.addresses import addresses, resolve
from mambaxfer_cli.engines.vllm.proof.pages import ExpectedPage, p_page_kinds, p_page_shape, request_pages
from mambaxfer_cli.proof.pattern import POISON, PageShape, Part, page, unit_bytes_pattern
from mambaxfer_cli.engines.vllm.plan import Plan

# What ``WrongByte.reason`` calls the P bytes a descriptor read in the wrong place.
REGION_WORDS = {"ssm": "temporal bytes", "padding": "page padding", "beyond": "bytes beyond the page"}


class Patterns:
    """The pattern's bytes (proof/pattern.py) of whole regions, generated once per (layer, block,
    region) and sliced for each rank, so every TP size of one model shares the work."""

    def __init__(self) -> None:
        self._whole = functools.cache(lambda layer, block, region, units, unit_bytes: np.ascontiguousarray(
            unit_bytes_pattern(layer, block, region, 0, units, unit_bytes)))

    def rows(self, layer: int, block: int, part: Part) -> np.ndarray:
        """``(units, unit_bytes)``: the bytes of the part's units, as ``pattern.part_bytes`` gives
        them for the part's pattern key (``layer``, ``block``)."""
        whole: np.ndarray = self._whole(layer, block, part.region, part.total_units, part.unit_bytes)
        return whole[part.first_unit:part.first_unit + part.units]

    def page(self, shape: PageShape, layer: int, block: int) -> np.ndarray:
        """A whole page as ``pattern.page`` makes it, from the cached regions."""
        return page(shape, layer, block, rows=self.rows)


@dataclass(frozen=True)
class Problem:
    """Something wrong with a plan that is not (only) a wrong byte: IDs, lists, stray writes."""

    code: str            # id-rank | id-length | id-range | id-size | id-duplicate | outside-memory
                         # | reads-descriptors | outside-request | write-count
    message: str
    d_rank: int | None = None
    p_rank: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass(frozen=True)
class ByteSource:
    """Where a D byte was copied from."""

    p_rank: int
    space: str
    tensor: int
    block: int
    offset: int
    holds: str           # what P keeps there, e.g. "ssm head 0 byte 0"

    def describe(self) -> str:
        return (f"P{self.p_rank} {_place(self.space, self.tensor, self.block)} offset {self.offset}, "
                f"which holds {self.holds}")

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


# Where a page is, by space: PLE pages one per PLE layer (decoder layer, 0-based), an indexer's one per
# indexed-attention layer.
PLACES = {"attention": "tensor {} attention block {}", "ple": "PLE layer {} block {}",
          "ring": "indexer ring layer {} block {}", "ckey": "indexer compressed keys layer {} block {}"}


def _place(space: str, tensor: int, block: int) -> str:
    return PLACES.get(space, "tensor {} SSM block {}").format(tensor, block)


@dataclass(frozen=True)
class WrongByte:
    d_rank: int
    space: str           # "ssm" | "attention" | "ple" | "ring" | "ckey"
    tensor: int          # SSM tensor, attention stream, or PLE layer
    block: int           # D's block (attention: kernel block)
    p_block: int         # the P block it is paired with in the request
    offset: int          # byte within the D page or slot
    wants: str           # what D should hold there, e.g. "C channel 0 byte 0"
    expected: int
    found: int
    writes: int
    source: ByteSource | None

    @property
    def reason(self) -> str:
        """In a few words what went wrong, e.g. ``C read as B``."""
        if self.writes == 0 or self.source is None:
            return "never written"
        if self.writes > 1:
            return f"written {self.writes} times"
        wants, holds = self.wants.split(), self.source.holds.split()
        if holds[0] != wants[0]:
            return f"{REGION_WORDS.get(holds[0], holds[0])} read as {wants[0]}"
        if holds[:3] != wants[:3]:
            return f"{holds[1]} {holds[2]} read as {wants[1]} {wants[2]}"
        if holds != wants:
            return "bytes of the unit shifted"
        if self.source.block != self.p_block:
            kind = "kernel " if self.space == "attention" else ""
            return f"{kind}block {self.source.block} read instead of {self.p_block}"
        if self.source.tensor != self.tensor:
            what = "stream" if self.space == "attention" else "tensor"
            return f"{what} {self.source.tensor} read instead of {self.tensor}"
        return "wrong bytes"

    def describe(self) -> str:
        paired = f" (P block {self.p_block})" if self.p_block >= 0 else ""
        where = (f"D{self.d_rank} {_place(self.space, self.tensor, self.block)}{paired} "
                 f"byte {self.offset} = {self.wants}: "
                 f"expected 0x{self.expected:02x}, found 0x{self.found:02x}")
        if self.writes == 0 or self.source is None:
            return f"{where}, never written (poisoned)"
        times = "" if self.writes == 1 else f", written {self.writes} times, last"
        return f"{where}{times} from {self.source.describe()}"

    def to_dict(self) -> dict[str, Any]:
        return {**vars(self), "source": self.source.to_dict() if self.source else None, "reason": self.reason,
                "description": self.describe()}


@dataclass(frozen=True)
class Damage:
    """Wrong bytes of one region of one D rank, over all the request's pages."""

    d_rank: int
    space: str
    region: str
    wrong_bytes: int
    pages: int
    first: WrongByte

    def to_dict(self) -> dict[str, Any]:
        return {**vars(self), "first": self.first.to_dict()}


@dataclass(frozen=True)
class Simulation:
    reads: int
    pairs: int                   # descriptor ID pairs of all reads
    bytes_moved: int
    bytes_verified: int
    problems: tuple[Problem, ...]
    damage: tuple[Damage, ...]   # D rank order, then the request's page order

    @property
    def ok(self) -> bool:
        return not self.problems and not self.damage

    @property
    def wrong_bytes(self) -> int:
        return sum(d.wrong_bytes for d in self.damage)

    @property
    def first_wrong(self) -> WrongByte | None:
        return self.damage[0].first if self.damage else None


def _describe_id(dlist: DescriptorList, desc_id: int) -> str:
    info = {k: int(v[0]) for k, v in resolve(dlist, np.array([desc_id])).items()}
    if info["attention"]:
        return f"attention stream {info['tensor']} kernel block {info['block']}"
    return (f"SSM tensor {info['tensor']} region #{info['region']} block {info['block']} "
            f"(offset {info['offset']}, {info['size']} B)")


def id_problems(read: DescriptorRead, p_tp: int, d_tp: int) -> list[Problem]:
    """Equal-length lists, every ID inside its list, equal sizes pair by pair, no ID twice."""
    where = f"D{read.d_rank} <- P{read.p_rank} ({read.local_list})"
    out = []

    def problem(code: str, message: str) -> None:
        out.append(Problem(code, f"{where}: {message}", read.d_rank, read.p_rank))

    if not 0 <= read.p_rank < p_tp:
        problem("id-rank", f"P rank {read.p_rank} does not exist (P TP is {p_tp})")
    if not 0 <= read.d_rank < d_tp:
        problem("id-rank", f"D rank {read.d_rank} does not exist (D TP is {d_tp})")
    local, remote = np.asarray(read.local_ids), np.asarray(read.remote_ids)
    if len(local) != len(remote):
        problem("id-length", f"{len(local)} local IDs but {len(remote)} remote IDs")
    in_range = True
    for side, ids, dlist in (("local", local, read.local), ("remote", remote, read.remote)):
        bad = ids[(ids < 0) | (ids >= dlist.length)]
        if bad.size:
            in_range = False
            problem("id-range", f"{side} ID {int(bad[0])} is outside its list of {dlist.length} "
                                f"descriptors ({bad.size} such IDs)")
        values, counts = np.unique(ids, return_counts=True)
        twice = values[counts > 1]
        if twice.size:
            problem("id-duplicate", f"{side} ID {int(twice[0])} ({_describe_id(dlist, int(twice[0]))}) "
                                    f"appears {int(counts[counts > 1][0])} times ({twice.size} repeated IDs)")
    if in_range and len(local) == len(remote) and len(local):
        ls, rs = resolve(read.local, local)["size"], resolve(read.remote, remote)["size"]
        bad = np.flatnonzero(ls != rs)
        if bad.size:
            i = int(bad[0])
            problem("id-size", f"pair {i}: local ID {int(local[i])} ({_describe_id(read.local, int(local[i]))}) "
                               f"is {int(ls[i])} bytes but remote ID {int(remote[i])} "
                               f"({_describe_id(read.remote, int(remote[i]))}) is {int(rs[i])} bytes "
                               f"({bad.size} such pairs)")
    return out


def reads_vs_descriptors(plan: Plan) -> list[Problem]:
    """The descriptor lists must be the plan's segments: the same pieces on both sides."""
    out = []
    by_pair = {(r.d_rank, r.p_rank): r for r in plan.reads}
    seen = set()
    for dread in plan.moved_descriptors.reads:
        key = (dread.d_rank, dread.p_rank)
        read = by_pair.get(key)
        segs = read.segments if read else ()
        local = tuple((s.local_offset, s.size) for s in segs)
        remote = tuple((s.remote_offset, s.size) for s in segs)
        if key in seen:
            out.append(Problem("reads-descriptors", f"D{key[0]} <- P{key[1]}: two descriptor reads", *key))
        seen.add(key)
        if dread.local.regions != local or dread.remote.regions != remote:
            out.append(Problem(
                "reads-descriptors",
                f"D{key[0]} <- P{key[1]}: the descriptor lists (local {list(dread.local.regions)}, "
                f"remote {list(dread.remote.regions)}) are not the plan's segments "
                f"(local {list(local)}, remote {list(remote)})", *key))
    for key, read in by_pair.items():
        if key not in seen and read.segments:
            out.append(Problem("reads-descriptors",
                               f"D{key[0]} <- P{key[1]}: the plan reads {read.bytes} bytes but no descriptor "
                               f"read carries them", *key))
    return out


@dataclass(frozen=True)
class _Memory:
    """One side's registered memory: each KV-cache tensor ``blocks`` pages of ``page`` bytes."""

    page: int
    blocks: int


def _addresses(dlist: DescriptorList, ids: np.ndarray,
               memory: _Memory) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    tensor, addr, size = addresses(dlist, ids, memory.page)
    fits = (addr >= 0) & (size >= 0) & (addr + size <= memory.blocks * memory.page)
    return tensor, addr, size, fits


def _chunks(read: DescriptorRead, p: _Memory, d: _Memory, problems: list[Problem]) -> np.ndarray:
    """The pairs of one read as copies that stay inside one page on both sides."""
    local, remote = np.asarray(read.local_ids, np.int64), np.asarray(read.remote_ids, np.int64)
    dt, da, size, dfit = _addresses(read.local, local, d)
    st, sa, _, sfit = _addresses(read.remote, remote, p)
    fits = dfit & sfit
    if not fits.all():
        i = int(np.flatnonzero(~fits)[0])
        side, lst, ids = ("local", read.local, local) if not dfit[i] else ("remote", read.remote, remote)
        problems.append(Problem(
            "outside-memory",
            f"D{read.d_rank} <- P{read.p_rank}: {side} ID {int(ids[i])} ({_describe_id(lst, int(ids[i]))}) "
            f"points outside the engine's registered memory ({int((~fits).sum())} such pairs, not copied)",
            read.d_rank, read.p_rank))
    keep = fits & (size > 0)
    dt, da, st, sa, size = (a[keep] for a in (dt, da, st, sa, size))
    dpage, spage = d.page, p.page
    spans = ((da // dpage) != ((da + size - 1) // dpage)) | ((sa // spage) != ((sa + size - 1) // spage))
    rows = [dt, da, st, sa, size]
    if spans.any():
        extra: list[list[int]] = [[] for _ in rows]
        origin: list[int] = []
        for i in np.flatnonzero(spans).tolist():
            d0, s0, n, pos = int(da[i]), int(sa[i]), int(size[i]), 0
            while pos < n:
                step = min(n - pos, dpage - (d0 + pos) % dpage, spage - (s0 + pos) % spage)
                for col, value in zip(extra, (dt[i], d0 + pos, st[i], s0 + pos, step)):
                    col.append(int(value))
                origin.append(i)
                pos += step
        # Keep the copies in the read's order: with repeated writes, the last one wins.
        order = np.argsort(np.concatenate([np.flatnonzero(~spans), origin]), kind="stable")
        rows = [np.concatenate([a[~spans], np.array(e, dtype=np.int64)])[order] for a, e in zip(rows, extra)]
    dt, da, st, sa, size = rows
    p_rank = np.full(len(size), read.p_rank, dtype=np.int64)
    return np.stack([dt, da // dpage, da % dpage, p_rank, st, sa // spage, sa % spage, size], axis=1)


# Columns of a chunk row.
_DT, _DB, _DO, _PR, _ST, _SB, _SO, _N = range(8)


class _Sources:
    """P ranks' pages, generated from the pattern the first time a read touches them."""

    def __init__(self, plan: Plan, patterns: Patterns) -> None:
        self.kinds = kinds = p_page_kinds(plan)

        @functools.cache
        def shape(p_rank: int, tensor: int, block: int) -> PageShape:
            return p_page_shape(plan, p_rank, tensor, block, kinds)

        @functools.cache
        def page(p_rank: int, tensor: int, block: int) -> np.ndarray:
            return patterns.page(shape(p_rank, tensor, block), tensor, block)

        self.shape, self.page = shape, page


def _coverage(keys: np.ndarray, starts: np.ndarray, ends: np.ndarray,
              fences: dict[int, tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per page, the (key, start, end, count) intervals written ``count`` times; ``fences`` (page start,
    state end, page end) make unwritten stretches of expected pages show up with count 0."""
    fence_keys = [k for k, marks in fences.items() for _ in marks]
    fence_pos = [m for marks in fences.values() for m in marks]
    key = np.concatenate([keys, keys, np.array(fence_keys, dtype=np.int64)])
    pos = np.concatenate([starts, ends, np.array(fence_pos, dtype=np.int64)])
    delta = np.concatenate([np.ones(len(starts), np.int64), -np.ones(len(ends), np.int64),
                            np.zeros(len(fence_pos), np.int64)])
    order = np.lexsort((pos, key))
    key, pos, count = key[order], pos[order], np.cumsum(delta[order])
    same = key[:-1] == key[1:]
    length = pos[1:] - pos[:-1]
    keep = same & (length > 0)
    return key[:-1][keep], pos[:-1][keep], pos[1:][keep], count[:-1][keep]


def _find_source(chunks: np.ndarray, page_index: np.ndarray, key: int, offset: int,
                 sources: _Sources) -> ByteSource | None:
    """Where in P the last chunk that wrote ``offset`` of page ``key`` copied that byte from."""
    hit = np.flatnonzero((page_index == key) & (chunks[:, _DO] <= offset)
                         & (offset < chunks[:, _DO] + chunks[:, _N]))
    if not hit.size:
        return None
    p_rank, tensor, block, at = (int(v) for v in chunks[hit[-1]][[_PR, _ST, _SB, _SO]])
    at += offset - int(chunks[hit[-1]][_DO])
    kind = "attention" if sources.kinds.get(block) else "ssm"
    return ByteSource(p_rank, kind, tensor, block, at, sources.shape(p_rank, tensor, block).describe(at))


def simulate(plan: Plan, patterns: Patterns | None = None) -> Simulation:
    """Perform every descriptor read of ``plan`` on simulated memory and verify every D byte."""
    patterns = patterns or Patterns()
    desc = plan.moved_descriptors
    p_memory, d_memory = (_Memory(e.page_bytes, e.lists.logical_blocks) for e in (plan.prefill, plan.decode))
    sources = _Sources(plan, patterns)
    problems = reads_vs_descriptors(plan)

    per_rank: dict[int, list[np.ndarray]] = {d: [] for d in range(plan.decode.tp)}
    pairs = 0
    for dread in desc.reads:
        pairs += len(dread.local_ids)
        found = id_problems(dread, plan.prefill.tp, plan.decode.tp)
        problems.extend(found)
        # NIXL refuses a transfer whose lists, IDs or sizes disagree; repeated IDs it performs.
        if any(p.code != "id-duplicate" for p in found):
            continue
        per_rank[dread.d_rank].append(_chunks(dread, p_memory, d_memory, problems))

    damage: list[Damage] = []
    bytes_moved = bytes_verified = 0
    for d_rank in range(plan.decode.tp):
        chunks = (np.concatenate(per_rank[d_rank]) if per_rank[d_rank]
                  else np.zeros((0, 8), dtype=np.int64))
        bytes_moved += int(chunks[:, _N].sum())
        wrong, verified = _verify_rank(d_rank, chunks, request_pages(plan, d_rank), d_memory, sources,
                                       patterns, problems)
        damage.extend(wrong)
        bytes_verified += verified
    return Simulation(len(desc.reads), pairs, bytes_moved, bytes_verified, tuple(problems), tuple(damage))


def _verify_rank(d_rank: int, chunks: np.ndarray, expected: Sequence[ExpectedPage], memory: _Memory,
                 sources: _Sources, patterns: Patterns, problems: list[Problem]) -> tuple[list[Damage], int]:
    # Pages: the request's first (in request order), then any other page a write touched.
    index: dict[tuple[int, int], int] = {}
    for e in expected:
        index.setdefault(e.key, len(index))
    n_expected = len(index)
    by_key = {e.key: e for e in expected}
    page_index = np.array([index.setdefault(key, len(index)) for key in map(tuple, chunks[:, [_DT, _DB]].tolist())],
                          dtype=np.int64)
    keys = list(index)

    pages = [np.full(memory.page, POISON, dtype=np.uint8) for _ in keys]
    for row, k in zip(chunks.tolist(), page_index.tolist()):
        src = sources.page(row[_PR], row[_ST], row[_SB])
        pages[k][row[_DO]:row[_DO] + row[_N]] = src[row[_SO]:row[_SO] + row[_N]]

    fences: dict[int, tuple[int, ...]] = {k: (0, by_key[key].shape.state_bytes, memory.page)
                                          for k, key in enumerate(keys[:n_expected])}
    ck, c0, c1, cn = _coverage(page_index, chunks[:, _DO], chunks[:, _DO] + chunks[:, _N], fences)

    # Writes count: outside the request, into padding, never, or more than once.
    bad_cover: dict[int, list[tuple[int, int, int]]] = {}
    stray = never = twice = padding = 0
    for k, a, b, n in zip(ck.tolist(), c0.tolist(), c1.tolist(), cn.tolist()):
        if k >= n_expected:
            stray += (b - a) if n else 0
            continue
        state = by_key[keys[k]].shape.state_bytes
        if a >= state:
            padding += (b - a) if n else 0
        elif n != 1:
            bad_cover.setdefault(k, []).append((a, b, n))
            never += (b - a) if n == 0 else 0
            twice += (b - a) if n > 1 else 0
    if stray:
        tensor, block = keys[n_expected]
        problems.append(Problem("outside-request",
                                f"D{d_rank}: {stray} bytes written outside the request's blocks, first into "
                                f"tensor {tensor} block {block}", d_rank))
    parts = [f"{n} bytes {what}" for n, what in ((never, "never written"), (twice, "written more than once"),
                                                 (padding, "written into page padding")) if n]
    if parts:
        problems.append(Problem("write-count", f"D{d_rank}: " + ", ".join(parts), d_rank))

    found: dict[tuple[str, str], list[Any]] = {}     # (space, region) -> [wrong bytes, pages, first]
    verified = 0
    for e in expected:
        k = index[e.key]
        shape, got_page = e.shape, pages[k]
        verified += shape.state_bytes
        for part in shape.parts:
            want = patterns.rows(*part.key(e.tensor, e.p_block), part).reshape(-1)
            got = got_page[part.offset:part.end]
            cover = [(a, b, n) for a, b, n in bad_cover.get(k, ()) if a < part.end and b > part.offset]
            if not cover and np.array_equal(got, want):
                continue
            wrong = got != want
            for a, b, _ in cover:
                wrong[max(a - part.offset, 0):min(b, part.end) - part.offset] = True
            count = int(np.count_nonzero(wrong))
            if not count:
                continue
            entry = found.setdefault((e.kind, part.region), [0, 0, None])
            entry[0] += count
            entry[1] += 1
            if entry[2] is None:
                offset = part.offset + int(np.argmax(wrong))
                writes = next((n for a, b, n in cover if a <= offset < b), 1)
                source = _find_source(chunks, page_index, k, offset, sources)
                entry[2] = WrongByte(d_rank, e.kind, e.tensor, e.block, e.p_block, offset,
                                     shape.describe(offset), int(want[offset - part.offset]),
                                     int(got[offset - part.offset]), writes if source else 0, source)
    damage = [Damage(d_rank, space, region, count, n_pages, first)
              for (space, region), (count, n_pages, first) in found.items()]
    return damage, verified
