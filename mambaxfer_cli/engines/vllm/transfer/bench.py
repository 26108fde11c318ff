"""``mambaxfer bench``: a plan's real transfer against the machine's limit, both directions
(docs/bench.md); the UCX transport is read from UCX's own info log of the endpoints."""

from __future__ import annotations

import re
import secrets
from typing import Any

from mambaxfer_cli.engines.vllm.transfer.bench_variants import (
    COALESCED, DIRECTIONS, LIMIT, MODES, ORDER, PLANNED, bench_tasks, limit_chunks,
)
from mambaxfer_cli.execute.coordinator import Progress, run_ranks
from mambaxfer_cli.engines.vllm.transfer.results import BenchResult
from mambaxfer_cli.render.console import tp_pairing
from mambaxfer_cli.execute.results import summarise
from mambaxfer_cli.execute.tasks import RunSettings
from mambaxfer_cli.engines.vllm.plan import Plan
from mambaxfer_cli.engines.vllm.proof.addresses import read_bytes

SCHEMA = "mambaxfer.bench/v1"


# UCX's info log names each endpoint configuration: "<agent> intra-node cfg#1 rma_am(tcp/lo) am(tcp/lo cma/memory) ..."
_CFG = re.compile(r"UCX\s+INFO\s+(\S+)\s+(intra-node|inter-node)\s+cfg#\d+\s+(.*)$")
_LANE = re.compile(r"(\w+)\(([^)]*)\)")
DATA_LANES = ("rma_bw", "rma", "rma_am", "am")     # the lanes that carry a READ's or WRITE's bytes


def transports(log_text: str, run_id: str) -> dict[str, Any]:
    """Per role (P: WRITE, D: READ) the UCX lanes of the endpoints its agents used, and transport names."""
    out: dict[str, set[str]] = {"P": set(), "D": set()}
    lanes: dict[str, set[str]] = {"P": set(), "D": set()}
    for line in log_text.splitlines():
        match = _CFG.search(line)
        if not match or not match.group(1).startswith(f"mambaxfer-{run_id}-"):
            continue
        role = match.group(1)[len(f"mambaxfer-{run_id}-")][0]
        for lane, tls in _LANE.findall(match.group(3)):
            if lane in DATA_LANES:
                lanes[role].add(f"{lane}({tls})")
                out[role].update(t.split("/")[0] for t in tls.split())
    return {direction: {"transports": sorted(out[role]), "ucx_lanes": sorted(lanes[role])}
            for direction, role in (("READ", "D"), ("WRITE", "P"))}


def bench_point(planned: Plan, coalesced: Plan, device: str, gpus: int, iters: int, timeout: float,
                progress: Progress | None = None) -> dict[str, Any]:
    """One request size: run all variants in both directions; the document's ``points`` entry."""
    settings = RunSettings(secrets.token_hex(4), device, gpus, "127.0.0.1", 0, iters)
    prefill, decode = bench_tasks(planned, coalesced, settings)
    finished = run_ranks([*prefill, *decode], settings.run_id, timeout, progress,
                         forced={"UCX_LOG_LEVEL": "info"})     # each rank keeps UCX's log of its endpoints
    results = [r for r in finished.results.values() if isinstance(r, BenchResult)]
    by_role = {role: {r.rank: r for r in results if r.role == role} for role in ("P", "D")}
    reads = {PLANNED: planned.moved_descriptors.reads, COALESCED: coalesced.moved_descriptors.reads,
             LIMIT: planned.moved_descriptors.reads}
    variants: dict[str, dict[str, Any]] = {}
    for direction in DIRECTIONS:
        variants[direction] = {}
        initiators = by_role["D" if direction == "READ" else "P"].values()
        for name in ORDER:
            step = f"{direction}:{name}"
            nbytes = sum(read_bytes(r.local, r.local_ids) for r in reads[name])
            row = summarise([(r.timings[step], r.preparations[name]) for r in initiators if step in r.timings],
                            nbytes, iters, "segment_bytes")
            if name == LIMIT:
                row["descriptors_posted"] = sum(len(limit_chunks([r for r in reads[name] if r.d_rank == d]))
                                                for d in by_role["D"])
                row["segment_bytes"] = nbytes // max(row["descriptors_posted"], 1)
                row["per_descriptor_us"] = row["time_us"]["median"] / max(row["descriptors_posted"], 1)
            checks = [r.checks[step] for r in by_role["D"].values()]
            row["verified"] = all(c.ok for c in checks)
            row["checked_bytes"] = sum(c.checked_bytes for c in checks)
            row["wrong_bytes"] = sum(c.wrong_bytes for c in checks)
            variants[direction][name] = row
    ratios = {direction: {f"{name}/limit": (variants[direction][name]["gb_per_s"]["median"]
                                            / variants[direction][LIMIT]["gb_per_s"]["median"])
                          for name in (PLANNED, COALESCED)} for direction in DIRECTIONS}
    return {"request_blocks": len(planned.descriptors.request.decode_blocks[0]),
            "device": device, "memory": settings.mem_type,
            "transport": transports("\n".join(line for r in results for line in r.ucx_lines), settings.run_id),
            "variants": variants, "ratios": ratios,
            "verified": all(v["verified"] for d in variants.values() for v in d.values())}


def bench_document(planned: Plan, points: list[dict[str, Any]], iters: int) -> dict[str, Any]:
    return {"schema": SCHEMA, "model": planned.model.name, "semantics": planned.semantics,
            "p_tp": planned.prefill.tp, "d_tp": planned.decode.tp, "iters": iters,
            "directions": MODES, "variants": {PLANNED: "the plan's descriptors", COALESCED: "the plan with --coalesce",
                                              LIMIT: "one descriptor per source P rank, the same bytes"},
            "points": points, "verified": all(p["verified"] for p in points)}


def draw_chart(document: dict[str, Any], plt: Any) -> Any:
    """GB/s against request size, one line per variant and direction (READ solid, WRITE dotted), the
    limit in black: the figure."""
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    colours = {PLANNED: "tab:blue", COALESCED: "tab:orange", LIMIT: "black"}
    markers = {PLANNED: "o", COALESCED: "s", LIMIT: ""}
    lines = {"READ": "-", "WRITE": ":"}
    for device in sorted({p["device"] for p in document["points"]}):
        points = sorted((p for p in document["points"] if p["device"] == device),
                        key=lambda p: p["variants"]["READ"][PLANNED]["bytes"])
        for direction in DIRECTIONS:
            for name in ORDER:
                xs = [p["variants"][direction][name]["bytes"] / 2**20 for p in points]
                ys = [p["variants"][direction][name]["gb_per_s"]["median"] for p in points]
                ax.plot(xs, ys, linestyle=lines[direction], marker=markers[name], color=colours[name],
                        linewidth=2.2 if name == LIMIT else 1.4, label=f"{device} {direction} {name}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per request (MiB)")
    ax.set_ylabel("GB/s (median)")
    ax.set_title(f"{document['model']} {tp_pairing(document['p_tp'], document['d_tp'])}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return fig
