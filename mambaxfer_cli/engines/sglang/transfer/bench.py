"""``bench --engine sglang``: execute's ranks (each rank's entries in one registered region) move one
request ``--iters`` times as planned, then as one descriptor per P -> D pair (the limit)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from mambaxfer_cli.engines.sglang.plan import SGLangPlan
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.execute.coordinator import Progress, run_ranks
from mambaxfer_cli.execute.results import summarise
from mambaxfer_cli.engines.sglang.transfer.run import (
    SlotDecodeTask, SlotPrefillTask, Transfer, build_tasks, chosen_writes, transfer,
)
from mambaxfer_cli.engines.sglang.transfer.results import SlotBenchResult
from mambaxfer_cli.execute.tasks import RunSettings

SCHEMA = "mambaxfer.sglang-bench/v1"
PLANNED, LIMIT = "planned", "limit"
ORDER = (PLANNED, LIMIT)


@dataclass(frozen=True)
class SlotBenchPrefill(SlotPrefillTask):
    iters: int = 1
    limit: tuple[tuple[int, int, int], ...] = ()     # per D rank in ``writes``' order: (d_rank, D offset, bytes)
    module: ClassVar[str] = "bench_rank"


@dataclass(frozen=True)
class SlotBenchDecode(SlotDecodeTask):
    iters: int = 1
    limit: tuple[tuple[int, int, int], ...] = ()     # per writer: (p_rank, D offset, bytes)
    prefill: tuple[SlotPrefillTask, ...] = ()        # each P rank's entries and pages, without its writes
    module: ClassVar[str] = "bench_rank"


def bench_tasks(plan: SGLangPlan, settings: RunSettings, iters: int,
                kv: Transfer | None = None) -> tuple[list[SlotBenchPrefill], list[SlotBenchDecode]]:
    """Execute's tasks (``kv``: what moves, as ``build_tasks``' ``moved``), one registered region
    per rank, and the limit variant's chunks."""
    prefill, decode = build_tasks(plan, settings, rounds=1, moved=kv)
    moved = {(p.rank, d): sum(x.length for x in descriptors) for p in prefill for d, descriptors in p.writes}
    chunks: dict[int, list[tuple[int, int, int]]] = {}
    for d in decode:
        offset = 0
        for p_rank in d.writers:
            size = moved[p_rank, d.rank]
            if size > prefill[p_rank].memory.total_bytes:
                raise UserError(f"P{p_rank} writes {size} bytes into D{d.rank}, more than it holds: no one "
                                f"descriptor moves them")
            chunks.setdefault(d.rank, []).append((p_rank, offset, size))
            offset += size
        if offset > d.memory.total_bytes:
            raise UserError(f"D{d.rank} receives {offset} bytes, more than its entries hold: no one descriptor "
                            f"per source moves them")
    sources = tuple(replace(p, writes=()) for p in prefill)
    return ([SlotBenchPrefill(**{**vars(p), "memory": replace(p.memory, single_region=True)}, iters=iters,
                              limit=tuple((d, o, s) for d, _ in p.writes
                                          for q, o, s in chunks[d] if q == p.rank)) for p in prefill],
            [SlotBenchDecode(**{**vars(d), "memory": replace(d.memory, single_region=True)}, iters=iters,
                             limit=tuple(chunks.get(d.rank, ())), prefill=sources) for d in decode])


@dataclass(frozen=True)
class Prepared:
    """One SGLang bench run, its tasks built (every refusal said) before any rank starts."""

    plan: SGLangPlan
    semantics: str
    settings: RunSettings
    prefill: list[SlotBenchPrefill]
    decode: list[SlotBenchDecode]


def prepare(plan: SGLangPlan, semantics: str, device: str, gpus: int, iters: int) -> Prepared:
    """The run's tasks; raises UserError where the writes cannot be executed or benched."""
    settings = RunSettings(secrets.token_hex(4), device, gpus, "127.0.0.1", 0, iters)
    chosen = chosen_writes(plan, semantics)
    # With a draft, its KV pool moves after the target's KV, as execute moves them; so does a DSA
    # model's pool, whose index keys SGLang registers as a state component (StateType.DSA).
    moved = transfer(chosen, semantics) if plan.draft or plan.dsa_entries else None
    prefill, decode = bench_tasks(chosen, settings, iters, moved)
    return Prepared(plan, semantics, settings, prefill, decode)


def measure(prepared: Prepared, timeout: float, progress: Progress | None = None) -> dict[str, Any]:
    """Run a prepared bench: the ``mambaxfer.sglang-bench/v1`` document."""
    plan, semantics, settings = prepared.plan, prepared.semantics, prepared.settings
    prefill, decode, iters, device = prepared.prefill, prepared.decode, settings.iters, settings.device
    finished = run_ranks([*decode, *prefill], settings.run_id, timeout, progress)
    results = [r for r in finished.results.values() if isinstance(r, SlotBenchResult)]
    p_results = [r for r in results if r.role == "P"]
    d_results = [r for r in results if r.role == "D"]
    nbytes = sum(x.length for p in prefill for _, descriptors in p.writes for x in descriptors)
    variants = {}
    for name in ORDER:
        row = summarise([(r.timings[name], r.preparations[name]) for r in p_results], nbytes, iters,
                        "bytes_per_descriptor", telemetry=False)
        checks = [r.checks[name] for r in d_results]
        row.update(verified=all(c.wrong_bytes == 0 for c in checks),
                   checked_bytes=sum(c.checked_bytes for c in checks),
                   wrong_bytes=sum(c.wrong_bytes for c in checks))
        variants[name] = row
    limit_rate = variants[LIMIT]["gb_per_s"]["median"]
    return {"schema": SCHEMA, "engine": "sglang", "release": plan.release.version, "model": plan.model.name,
            "p_tp": plan.p_tp, "d_tp": plan.d_tp, "backend": plan.backend, "semantics": semantics, "iters": iters,
            "device": device, "memory": settings.mem_type, "entries": len(decode[0].entries),
            "ssm_layers": plan.verdict.ssm_layers,
            "variants": variants,
            "ratio": variants[PLANNED]["gb_per_s"]["median"] / limit_rate if limit_rate else 0.0,
            "phases_s": finished.phases,
            "verified": all(v["verified"] for v in variants.values())}
