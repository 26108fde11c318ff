"""``mambaxfer bench``: a plan's real transfer against the machine's limit, both directions.

One run per request size: the same rank processes, NIXL agents and registered memory (one region
per rank, the KV-cache tensors back to back) move the request three ways, pull (D READs) and
push (P WRITEs): ``planned`` (the plan's descriptors), ``coalesced`` (the plan with --coalesce)
and ``limit`` (one descriptor per source P rank moving the same bytes). Every variant is checked
byte by byte on D. The UCX transport is read from UCX's own info log of the endpoints.
"""

from __future__ import annotations

import re
import secrets
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from mambaxfer_cli.errors import UserError

SCHEMA = "mambaxfer.bench/v1"
PLANNED, COALESCED, LIMIT = "planned", "coalesced", "limit"
ORDER = (PLANNED, COALESCED, LIMIT)
DIRECTIONS = ("READ", "WRITE")
MODES = {"READ": "pull (D READs)", "WRITE": "push (P WRITEs)"}


@dataclass(frozen=True)
class BenchSpec:
    """What every rank of a bench run needs besides its own task."""

    iters: int
    variants: tuple[tuple[str, dict], ...]     # (planned|coalesced, {d_rank: reads})
    decode_tasks: dict                         # variant -> {d_rank: DecodeTask} (what D must hold)
    order: tuple[str, ...] = ORDER


def limit_chunks(reads: Sequence) -> list[tuple[int, int, int]]:
    """The limit variant of one D rank's reads: per source P rank (in read order), the D offset and
    the bytes the plan moves from it; one descriptor each, laid back to back in D's memory."""
    sizes: dict[int, int] = {}
    for read in reads:
        sizes[read.p_rank] = sizes.get(read.p_rank, 0) + int(read.local.resolve(read.local_ids)["size"].sum())
    out, offset = [], 0
    for p_rank, size in sizes.items():
        out.append((p_rank, offset, size))
        offset += size
    return out


def prefill_image(task, p_rank: int, size: int) -> np.ndarray:
    """The first ``size`` bytes of P rank ``p_rank``'s memory (tensors back to back), as P fills it."""
    from mambaxfer_cli.proof.pattern import fill

    page = task.prefill_memory.page_bytes
    blocks = task.prefill_memory.logical_blocks
    out = np.empty(-(-size // page) * page, dtype=np.uint8).reshape(-1, page)
    for row in range(out.shape[0]):
        tensor, block = divmod(row, blocks)
        fill(out[row], task.prefill_pages[p_rank][tensor][block], tensor, block)
    return out.reshape(-1)[:size]


def limit_verdict(task, regions: Sequence[np.ndarray]) -> dict:
    """D's memory after the limit variant: each chunk P's first bytes, everything else poison."""
    from mambaxfer_cli.proof.pattern import POISON

    got = np.concatenate([r.reshape(-1) for r in regions])
    expected = np.full(got.size, POISON, dtype=np.uint8)
    for p_rank, offset, size in limit_chunks(task.reads):
        expected[offset:offset + size] = prefill_image(task, p_rank, size)
    wrong = int(np.count_nonzero(got != expected))
    return {"ok": wrong == 0, "checked_bytes": int(got.size), "wrong_bytes": wrong}


def bench_tasks(planned, coalesced, settings):
    """The rank tasks of one bench run: the planned plan's ranks, with one registered region each."""
    from mambaxfer_cli.execute.tasks import build_tasks, side_memory

    for side in ("prefill", "decode"):
        if side_memory(getattr(planned, side)) != side_memory(getattr(coalesced, side)):
            raise UserError(f"the coalesced plan lays out the {side} engine's memory differently")
    prefill, decode = build_tasks(planned, settings)
    _, decode_b = build_tasks(coalesced, settings)
    for a, b in zip(decode, decode_b):
        if [e.key for e in a.expected] != [e.key for e in b.expected]:
            raise UserError(f"the coalesced plan moves other pages to D{a.rank} than the planned one")

    def one(task):
        return replace(task, memory=replace(task.memory, single_region=True))

    decode = [replace(one(t), prefill_memory=replace(t.prefill_memory, single_region=True)) for t in decode]
    spec = BenchSpec(settings.iters,
                     variants=((PLANNED, {t.rank: t.reads for t in decode}),
                               (COALESCED, {t.rank: t.reads for t in decode_b})),
                     decode_tasks={PLANNED: {t.rank: t for t in decode}, COALESCED: {t.rank: t for t in decode_b}})
    settings = replace(settings, bench=spec)
    prefill = [replace(one(t), settings=settings) for t in prefill]
    decode = [replace(t, settings=settings) for t in decode]
    for name in (PLANNED, COALESCED):
        spec.decode_tasks[name].update({t.rank: replace(t, settings=settings) for t in spec.decode_tasks[name].values()})
    return prefill, decode


# UCX's info log names each endpoint configuration: "<agent> intra-node cfg#1 rma_am(tcp/lo) am(tcp/lo cma/memory) ..."
_CFG = re.compile(r"UCX\s+INFO\s+(\S+)\s+(intra-node|inter-node)\s+cfg#\d+\s+(.*)$")
_LANE = re.compile(r"(\w+)\(([^)]*)\)")
DATA_LANES = ("rma_bw", "rma", "rma_am", "am")     # the lanes that carry a READ's or WRITE's bytes


def transports(log_text: str, run_id: str) -> dict:
    """Per role (P: WRITE, D: READ) the UCX lanes of the endpoints its agents used, and transport names."""
    out: dict[str, set] = {"P": set(), "D": set()}
    lanes: dict[str, set] = {"P": set(), "D": set()}
    for line in log_text.splitlines():
        match = _CFG.search(line)
        if not match or not match.group(1).startswith(f"mambaxfer-{run_id}-"):
            continue
        role = match.group(1)[len(f"mambaxfer-{run_id}-")][0]
        for lane, tls in _LANE.findall(match.group(3)):
            if lane in DATA_LANES:
                lanes[role].add(f"{lane}({tls})")
                out[role].update(t.split("/")[0] for t in tls.split())
    return {"READ": {"transports": sorted(out["D"]), "ucx_lanes": sorted(lanes["D"])},
            "WRITE": {"transports": sorted(out["P"]), "ucx_lanes": sorted(lanes["P"])}}


def _p99(values: Sequence[float]) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), 99))


def summarise(steps: list[dict], nbytes: int, iters: int) -> dict:
    """One variant in one direction from its initiators' results (iteration i: the slowest initiator)."""
    times = [max(s["times"][i] for s in steps) for i in range(iters)]
    post = [max(s["post_us"][i] for s in steps) for i in range(iters)]
    xfer = [max(s["xfer_us"][i] for s in steps) for i in range(iters)]
    posted = sum(s["descs_posted"] for s in steps)
    median, p99 = statistics.median(times), _p99(times)
    return {"bytes": nbytes, "descriptors_posted": posted,
            "descriptors_kept": sum(s["descs_kept"] for s in steps),
            "segment_bytes": nbytes // max(posted, 1),
            "time_us": {"median": median * 1e6, "p99": p99 * 1e6},
            "gb_per_s": {"median": nbytes / median / 1e9 if median else 0.0,
                         "p99": nbytes / p99 / 1e9 if p99 else 0.0},
            "per_descriptor_us": median * 1e6 / max(posted, 1),
            "prep_ms": max(s["prep_s"] for s in steps) * 1e3,
            "make_ms": max(s["make_s"] for s in steps) * 1e3,
            "post_us": {"median": statistics.median(post), "p99": _p99(post)},
            "nixl_xfer_us": {"median": statistics.median(xfer), "p99": _p99(xfer)},
            "times_s": times}


def bench_point(planned, coalesced, device: str, gpus: int, iters: int, timeout: float,
                progress: Callable[[str, str, str], None] | None = None) -> dict:
    """One request size: run all variants in both directions; the document's ``points`` entry."""
    from mambaxfer_cli.execute.coordinator import environment, execute
    from mambaxfer_cli.execute.tasks import RunSettings

    settings = RunSettings(secrets.token_hex(4), device, gpus, "127.0.0.1", 0, iters)
    tasks = bench_tasks(planned, coalesced, settings)
    with environment({"UCX_LOG_LEVEL": "info"}):     # each rank keeps UCX's log of its endpoints
        outcome = execute(planned, tasks[0][0].settings, timeout, progress, tasks=tasks)
    decode = {d.d_rank: d.result for d in outcome.decode}
    prefill = outcome.prefill
    reads = {PLANNED: planned.descriptors.reads, COALESCED: coalesced.descriptors.reads,
             LIMIT: planned.descriptors.reads}
    variants: dict = {}
    for direction in DIRECTIONS:
        variants[direction] = {}
        for name in ORDER:
            step = f"{direction}:{name}"
            nbytes = sum(int(r.local.resolve(r.local_ids)["size"].sum()) for r in reads[name])
            initiators = decode.values() if direction == "READ" else prefill.values()
            row = summarise([r["steps"][step] for r in initiators if step in r["steps"]], nbytes, iters)
            if name == LIMIT:
                row["descriptors_posted"] = sum(len(limit_chunks([r for r in reads[name] if r.d_rank == d]))
                                                for d in decode)
                row["segment_bytes"] = nbytes // max(row["descriptors_posted"], 1)
                row["per_descriptor_us"] = row["time_us"]["median"] / max(row["descriptors_posted"], 1)
            verdicts = [r["steps"][step]["verdict"] for r in decode.values()]
            row["verified"] = all(v["ok"] for v in verdicts)
            row["checked_bytes"] = sum(v["checked_bytes"] for v in verdicts)
            row["wrong_bytes"] = sum(v["wrong_bytes"] for v in verdicts)
            variants[direction][name] = row
    ratios = {direction: {f"{name}/limit": (variants[direction][name]["gb_per_s"]["median"]
                                            / variants[direction][LIMIT]["gb_per_s"]["median"])
                          for name in (PLANNED, COALESCED)} for direction in DIRECTIONS}
    return {"request_blocks": len(planned.descriptors.request.decode_blocks[0]),
            "device": device, "memory": settings.mem_type,
            "transport": transports("\n".join(line for r in [*decode.values(), *prefill.values()]
                                              for line in r.get("ucx", ())), settings.run_id),
            "variants": variants, "ratios": ratios,
            "verified": all(v["verified"] for d in variants.values() for v in d.values())}


def bench_document(planned, points: list[dict], iters: int) -> dict:
    return {"schema": SCHEMA, "model": planned.model.name, "semantics": planned.semantics,
            "p_tp": planned.prefill.tp, "d_tp": planned.decode.tp, "iters": iters,
            "directions": MODES, "variants": {PLANNED: "the plan's descriptors", COALESCED: "the plan with --coalesce",
                                              LIMIT: "one descriptor per source P rank, the same bytes"},
            "points": points, "verified": all(p["verified"] for p in points)}


def write_chart(document: dict, path: Path) -> str | None:
    """GB/s against request size, one line per variant and direction (READ solid, WRITE dotted), the
    limit in black. Returns
    why not when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'mambaxfer[bench]')"
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    colours = {PLANNED: "tab:blue", COALESCED: "tab:orange", LIMIT: "black"}
    markers = {PLANNED: "o", COALESCED: "s", LIMIT: ""}
    lines = {"READ": "-", "WRITE": ":"}
    for device in sorted({p["device"] for p in document["points"]}):
        points = sorted((p for p in document["points"] if p["device"] == device), key=lambda p: p["variants"]["READ"][PLANNED]["bytes"])
        for direction in DIRECTIONS:
            for name in ORDER:
                xs = [p["variants"][direction][name]["bytes"] / 2**20 for p in points]
                ys = [p["variants"][direction][name]["gb_per_s"]["median"] for p in points]
                ax.plot(xs, ys, linestyle=lines[direction], marker=markers[name], color=colours[name],
                        linewidth=2.2 if name == LIMIT else 1.4, label=f"{device} {direction} {name}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per request (MiB)")
    ax.set_ylabel("GB/s (median)")
    ax.set_title(f"{document['model']} P TP {document['p_tp']} -> D TP {document['d_tp']}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None
