"""The CI gate: which P/D pairings to prove, and each one's verdict from a byte-level simulation."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Sequence

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.planning.layout import valid_tp_sizes
from mambaxfer_cli.limits import MAX_SIMULATION_BYTES, MAX_TP, within
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.planning.engine import Engines
from mambaxfer_cli.planning.geometry import EngineFlags
from mambaxfer_cli.proof import CHECK_NUM_BLOCKS
from mambaxfer_cli.planning.plan import Plan, PlanOptions, build_plan
from mambaxfer_cli.planning.reads import VLLM, Read, misreads, tp_ratio
from mambaxfer_cli.proof.simulate import Patterns, Simulation, request_pages, simulate

SCHEMA = "mambaxfer.check/v1"
ALL_PRESETS_MAX_TP = 8



@dataclass(frozen=True)
class Pairing:
    p_tp: int
    d_tp: int

    def __str__(self) -> str:
        return f"{self.p_tp}:{self.d_tp}"


def parse_pairs(text: str) -> tuple[Pairing, ...]:
    """``--pairs 1:4,4:1,2:3``: P:D TP sizes, comma-separated, in the order given."""
    pairs: list[Pairing] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        sides = item.split(":")
        try:
            if len(sides) != 2:
                raise ValueError
            pairing = Pairing(int(sides[0]), int(sides[1]))
        except ValueError:
            raise UserError(f"--pairs: '{item}' is not a P:D pair of TP sizes; write e.g. --pairs 1:4,4:1,2:3") from None
        if pairing.p_tp < 1 or pairing.d_tp < 1:
            raise UserError(f"--pairs: '{item}': TP sizes must be positive integers")
        if max(pairing.p_tp, pairing.d_tp) > MAX_TP:
            raise UserError(f"--pairs: '{item}': TP sizes are at most {MAX_TP}")
        if pairing not in pairs:
            pairs.append(pairing)
    if not pairs:
        raise UserError("--pairs: give at least one P:D pair, e.g. --pairs 1:4,4:1,2:3")
    return tuple(pairs)


def pairings_up_to(model: ModelSpec, max_tp: int, semantics: str) -> tuple[Pairing, ...]:
    """Every pairing of valid TP sizes <= ``max_tp``; under vLLM semantics only those where one
    size divides the other (vLLM refuses the rest)."""
    if max_tp < 1:
        raise UserError(f"--max-tp must be >= 1, got {max_tp}")
    sizes = valid_tp_sizes(model, max_tp)   # the SSM layout and, with attention, the KV heads
    return tuple(Pairing(p, d) for p, d in itertools.product(sizes, sizes)
                 if semantics != VLLM or tp_ratio(p, d) is not None)


@dataclass(frozen=True)
class Target:
    """One model and the pairings to prove for it."""

    model: ModelSpec
    pairings: tuple[Pairing, ...]
    listed: bool = False     # pairings the user named: a pairing that cannot be planned is their error


@dataclass(frozen=True)
class PairingResult:
    model: str
    p_tp: int
    d_tp: int
    semantics: str
    coalesce: bool
    tp_ratio: int | None
    verdict: str                     # "pass" | "fail" | "refused" (by vLLM, --semantics vllm) | "skip"
    seconds: float
    reads: int = 0                   # the plan's reads (one per D rank and source P rank)
    segments: int = 0
    descriptors: int = 0             # descriptor ID pairs of all descriptor reads
    bytes: int = 0                   # bytes copied
    simulation: Simulation | None = None
    misreads: tuple[str, ...] = ()   # what the plan's segments do wrong, region by region
    warnings: tuple[str, ...] = ()   # warning codes of the plan
    reason: str = ""                 # why a pairing was skipped
    vllm: dict | None = None         # the release's verdict on the pairing (plan's "vllm" field)

    @property
    def pairing(self) -> str:
        return f"P{self.p_tp} → D{self.d_tp}"

    @property
    def title(self) -> str:
        extra = ", coalesced" if self.coalesce else ""
        return f"{self.model} {self.pairing} ({self.semantics}{extra})"

    def explanation(self, limit: int = 8) -> list[str]:
        """Plain lines saying what is wrong: the first wrong byte, the damage per D rank and region,
        what the segments read, and every other problem."""
        sim = self.simulation
        if self.verdict == "skip":
            return [f"skipped: {self.reason}"]
        lines = []
        if self.vllm and not self.vllm["accepts"]:
            lines += [f"{self.vllm['releases']} refuses this pairing at handshake: {r['message']}"
                      for r in self.vllm["refusals"]]
        fix = self.vllm["suggested_block_size"] if self.vllm else None
        if fix and (self.verdict != "pass" or not self.vllm["accepts"]):
            lines.append(f"fix: --block-size {fix} on both engines")
        if sim is None or sim.ok:
            return lines
        if sim.first_wrong:
            lines.append(f"first wrong byte: {sim.first_wrong.describe()}")
        if sim.damage:
            lines.append(f"{sim.wrong_bytes} wrong bytes, by D rank and region:")
            for damage in sim.damage[:limit]:
                first = damage.first
                source = (f"P{first.source.p_rank} offset {first.source.offset} ({first.source.holds})"
                          if first.source and first.writes else "poisoned")
                lines.append(f"  D{damage.d_rank} {damage.region}: {first.reason}: {damage.wrong_bytes} bytes "
                             f"in {damage.pages} pages; first {first.wants} <- {source}")
            if len(sim.damage) > limit:
                lines.append(f"  and {len(sim.damage) - limit} more regions")
        if self.misreads:
            shown = "; ".join(self.misreads[:limit])
            more = f"; and {len(self.misreads) - limit} more" if len(self.misreads) > limit else ""
            lines.append(f"the plan's segments read: {shown}{more}")
        for problem in sim.problems[:limit]:
            lines.append(f"{problem.code}: {problem.message}")
        if len(sim.problems) > limit:
            lines.append(f"and {len(sim.problems) - limit} more problems")
        return lines

    def to_dict(self) -> dict:
        sim = self.simulation
        return {
            "model": self.model, "p_tp": self.p_tp, "d_tp": self.d_tp, "semantics": self.semantics,
            "coalesce": self.coalesce, "tp_ratio": self.tp_ratio, "verdict": self.verdict,
            "seconds": round(self.seconds, 4), "reads": self.reads, "segments": self.segments,
            "descriptors": self.descriptors, "bytes": self.bytes,
            "bytes_verified": sim.bytes_verified if sim else 0,
            "wrong_bytes": sim.wrong_bytes if sim else 0,
            "first_wrong_byte": sim.first_wrong.to_dict() if sim and sim.first_wrong else None,
            "damage": [d.to_dict() for d in sim.damage] if sim else [],
            "problems": [p.to_dict() for p in sim.problems] if sim else [],
            "misreads": list(self.misreads), "warnings": list(self.warnings),
            "reason": self.reason, "vllm": self.vllm, "explanation": self.explanation(limit=1000),
        }


@dataclass(frozen=True)
class CheckReport:
    semantics: str
    results: tuple[PairingResult, ...]
    seconds: float
    engines: Engines = Engines()

    @property
    def releases(self) -> str:
        return self.engines.releases

    @property
    def answered_for(self) -> str:
        return self.engines.describe()

    def count(self, verdict: str) -> int:
        return sum(1 for r in self.results if r.verdict == verdict)

    @property
    def ok(self) -> bool:
        return self.count("fail") == 0 and self.count("refused") == 0

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "semantics": self.semantics, **self.engines.to_dict(), "ok": self.ok,
                "summary": {"pairings": len(self.results), "passed": self.count("pass"),
                            "failed": self.count("fail"), "refused": self.count("refused"),
                            "skipped": self.count("skip"),
                            "seconds": round(self.seconds, 3)},
                "results": [r.to_dict() for r in self.results]}


def check_options(release=None, **overrides) -> PlanOptions:
    """PlanOptions with check's engine sizes (used by tests and the API), for ``release`` (default:
    EngineFlags')."""
    sides = {side: EngineFlags(num_blocks=n, **({} if release is None else {"release": release}))
             for side, n in CHECK_NUM_BLOCKS.items()}
    return replace(PlanOptions(**sides), **overrides)


def _segment_misreads(plan: Plan) -> tuple[str, ...]:
    """What the plan's segments land in the wrong place, skipping segments that leave the page
    (those are already problems of their own)."""
    p_ranks, d_ranks = plan.prefill.ranks, plan.decode.ranks
    sane = []
    for read in plan.reads:
        if not (0 <= read.p_rank < len(p_ranks) and 0 <= read.d_rank < len(d_ranks)):
            continue
        state = d_ranks[read.d_rank].state_bytes
        segs = tuple(s for s in read.segments
                     if s.size > 0 and s.local_offset >= 0 and s.remote_offset >= 0
                     and s.local_offset + s.size <= state)
        sane.append(Read(read.d_rank, read.p_rank, segs))
    return tuple(map(str, misreads(sane, p_ranks, d_ranks)))


def simulation_bytes(plan: Plan) -> int:
    """About what simulating the plan holds at once: every request page of one D rank, the P pages
    they are read from, and the pattern bytes they are compared with. Estimated vs peak RSS
    measured, 1:2 pairings: Mamba-Codestral with 1, 8 and 20 request blocks 0.41, 3.3 and 8.3 GB vs
    0.40, 2.8 and 6.8 GB; Nemotron-H-8B with 8: 2.9 vs 2.4 GB; Qwen3-Next with 8: 1.4 vs 1.2 GB."""
    p_page, d_page = plan.page_bytes
    return 2 * len(request_pages(plan, 0)) * (d_page + plan.prefill.tp * p_page)


def check_memory(plan: Plan, pairing: str) -> None:
    need = simulation_bytes(plan)
    if need > MAX_SIMULATION_BYTES:
        raise UserError(f"{plan.model.name} {pairing}: simulating this request needs about {need / 2**30:.1f} GiB, "
                        f"more than check's {MAX_SIMULATION_BYTES / 2**30:.0f} GiB; use fewer --request-blocks "
                        f"(or fewer layers in the model)")


def check_plan(plan: Plan, patterns: Patterns | None = None, coalesce: bool | None = None) -> PairingResult:
    """Prove one plan byte by byte (the plan may come from anywhere, a mutated one included)."""
    start = time.perf_counter()
    sim = simulate(plan, patterns)
    verdict = "pass" if sim.ok else "fail"
    if verdict == "pass" and plan.semantics == VLLM and not plan.verdict.accepts:
        verdict = "refused"     # what vLLM would do is refuse: the deployment does not work
    return PairingResult(
        model=plan.model.name, p_tp=plan.prefill.tp, d_tp=plan.decode.tp, semantics=plan.semantics,
        coalesce=plan.reads != plan.uncoalesced_reads if coalesce is None else coalesce,
        tp_ratio=plan.tp_ratio, verdict=verdict, seconds=time.perf_counter() - start,
        reads=len(plan.reads), segments=sum(len(r.segments) for r in plan.reads),
        descriptors=sim.pairs, bytes=sim.bytes_moved, simulation=sim,
        misreads=() if sim.ok else _segment_misreads(plan),
        warnings=tuple(w.code for w in plan.warnings), vllm=plan.verdict.to_dict())


def plan_pairing(model: ModelSpec, pairing: Pairing, options: PlanOptions,
                 listed: bool = True) -> Plan | PairingResult:
    """The plan of one pairing, or, for an enumerated pairing that cannot be planned, its skip.
    A pairing the user listed that cannot be planned is their error."""
    try:
        return build_plan(model, pairing.p_tp, pairing.d_tp, options)
    except UserError as exc:
        if listed:
            raise UserError(f"--pairs {pairing}: {exc}") from None
        return PairingResult(model.name, pairing.p_tp, pairing.d_tp, options.semantics, options.coalesce,
                             tp_ratio(pairing.p_tp, pairing.d_tp), "skip", 0.0, reason=str(exc))


def check_pairing(model: ModelSpec, pairing: Pairing, options: PlanOptions,
                  patterns: Patterns | None = None, listed: bool = True) -> PairingResult:
    """Plan and prove one pairing."""
    planned = plan_pairing(model, pairing, options, listed)
    if isinstance(planned, PairingResult):
        return planned
    return check_plan(planned, patterns, options.coalesce)


def run_check(targets: Sequence[Target], options: PlanOptions,
              on_start: Callable[[int], None] | None = None,
              on_result: Callable[[PairingResult], None] | None = None) -> CheckReport:
    """Prove every pairing of every target. Every plan is built first, so a user error shows up
    before any long simulation; the callbacks drive a progress display."""
    start = time.perf_counter()
    jobs = [(target, plan_pairing(target.model, pairing, options, target.listed))
            for target in targets for pairing in target.pairings]
    for target, planned in jobs:
        if not isinstance(planned, PairingResult):
            check_memory(planned, f"{planned.prefill.tp}:{planned.decode.tp}")
    if on_start:
        on_start(len(jobs))
    results, patterns, last_model = [], Patterns(), None
    for target, planned in jobs:
        if target.model is not last_model:
            patterns, last_model = Patterns(), target.model   # one model's pattern bytes, shared by its pairings
        if isinstance(planned, PairingResult):
            result = planned
        else:
            began = time.perf_counter()
            result = check_plan(planned, patterns, options.coalesce)
            result = replace(result, seconds=time.perf_counter() - began)
        results.append(result)
        if on_result:
            on_result(result)
    return CheckReport(options.semantics, tuple(results), time.perf_counter() - start, options.engines)


def targets_for(models: Iterable[ModelSpec], pairs: str | None, max_tp: int | None,
                semantics: str) -> list[Target]:
    """The pairings to prove for each model: the listed ones, or every valid one up to max_tp."""
    if pairs is not None and max_tp is not None:
        raise UserError("give either --pairs or --max-tp, not both")
    listed = parse_pairs(pairs) if pairs is not None else None
    if listed is None and max_tp is not None:
        within("--max-tp", max_tp, 1, MAX_TP, "deployment's TP size")
    out = []
    for model in models:
        if listed is not None:
            out.append(Target(model, listed, listed=True))
        else:
            out.append(Target(model, pairings_up_to(model, max_tp or ALL_PRESETS_MAX_TP, semantics)))
    return out
