"""The CI gate: which P/D pairings to prove, and each one's verdict from a byte-level simulation."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Sequence

from mambaxfer_cli.errors import UserError, reworded
from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG
from mambaxfer_cli.planning.layout import valid_tp_sizes
from mambaxfer_cli.render.console import tp_pairing
from mambaxfer_cli.limits import MAX_SIMULATION_BYTES, MAX_TP, within
from mambaxfer_cli.planning.model import ModelSpec
from mambaxfer_cli.engines.vllm.engine import Engines
from mambaxfer_cli.engines.vllm.handshake import fix_words
from mambaxfer_cli.engines.vllm.plan import Plan, PlanOptions, build_plan
from mambaxfer_cli.planning.reads import Read, misreads, tp_ratio
from mambaxfer_cli.engines.vllm.reads import EXACT, VLLM
from mambaxfer_cli.engines.vllm.startup import rank_layouts, refused_when
from mambaxfer_cli.engines.vllm.proof.pages import request_pages
from mambaxfer_cli.engines.vllm.proof.simulate import Patterns, Simulation, simulate
from mambaxfer_cli.proof.pattern import REGION_IDS
from mambaxfer_cli.proof.verdicts import ALL_PRESETS_MAX_TP, CORRUPTS, REFUSES, RIGHT, Pairing, parse_pairs

SCHEMA = "mambaxfer.check/v1"
# What check proves. BOTH, the default, answers the deployment question: is mambaxfer's exact plan
# right, and what does vLLM do with the pairing (move the right bytes, corrupt some, or refuse it)?
BOTH = "both"
CHECK_SEMANTICS = (BOTH, EXACT, VLLM)
# Regions in the order a page holds them, for naming what is corrupted.
REGION_ORDER = tuple(sorted((r for r in REGION_IDS if r != "pad"), key=REGION_IDS.__getitem__))


def pairings_up_to(model: ModelSpec, max_tp: int, semantics: str) -> tuple[Pairing, ...]:
    """Every pairing of valid TP sizes <= ``max_tp``; except under exact semantics only those where
    one size divides the other (vLLM refuses the rest at once, whatever the model)."""
    if max_tp < 1:
        raise UserError(f"--max-tp must be >= 1, got {max_tp}")
    sizes = valid_tp_sizes(model, max_tp)   # the SSM layout and, with attention, the KV heads
    return tuple(Pairing(p, d) for p, d in itertools.product(sizes, sizes)
                 if semantics == EXACT or tp_ratio(p, d) is not None)


@dataclass(frozen=True)
class Target:
    """One model and the pairings to prove for it."""

    model: ModelSpec
    pairings: tuple[Pairing, ...]
    listed: bool = False     # pairings the user named: a pairing that cannot be planned is their error
    unchecked: tuple[str, ...] = ()   # what an enumeration left out, and why


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
    vllm: dict[str, Any] | None = None         # the release's verdict on the pairing (plan's "vllm" field)
    vllm_check: "PairingResult | None" = None   # BOTH: the proof of vLLM's own reads, when it plans them
    exact_verdict: str | None = None            # BOTH: the verdict of mambaxfer's exact plan

    @property
    def pairing(self) -> str:
        return tp_pairing(self.p_tp, self.d_tp)

    @property
    def title(self) -> str:
        extra = ", coalesced" if self.coalesce else ""
        return f"{self.model} {self.pairing} ({self.semantics}{extra})"

    @property
    def _vllm_verdict(self) -> dict[str, Any]:
        assert self.vllm is not None, "a planned pairing has the release's verdict"
        return self.vllm

    @property
    def vllm_does(self) -> str | None:
        """BOTH: what vLLM does with the pairing: RIGHT, CORRUPTS or REFUSES (None otherwise)."""
        if self.semantics != BOTH or self.verdict == "skip":
            return None
        if not self._vllm_verdict["accepts"]:
            return REFUSES
        return CORRUPTS if self.vllm_check is None or self.vllm_check.verdict != "pass" else RIGHT

    def corrupted(self) -> str:
        """What vLLM's reads corrupt, in words: 'the B/C groups', 'the attention KV cache', ..."""
        regions = self._corrupted_regions()
        if not regions:
            sim = self.vllm_check.simulation if self.vllm_check else None
            return "the descriptors" if sim and sim.problems else "the state"
        if set(regions) <= {"B", "C"}:
            return f"the {'/'.join(regions)} groups"
        if regions == ["kv"]:
            return "the attention KV cache"
        return f"the {'/'.join(regions)} state"

    def _corrupted_regions(self) -> list[str]:
        sim = self.vllm_check.simulation if self.vllm_check else None
        found = {d.region for d in sim.damage} if sim else set()
        return sorted(found, key=lambda name: (REGION_ORDER.index(name) if name in REGION_ORDER
                                               else len(REGION_ORDER), name))

    @property
    def vllm_name(self) -> str:
        """The release(s) the verdict is for, e.g. 'vLLM 0.34'."""
        return self.vllm["releases"] if self.vllm else "vLLM"

    def deployment_line(self) -> str:
        """BOTH: the answer in one line: what vLLM does, how to fix it, and mambaxfer's plan."""
        pairing = f"{self.model} {self.pairing}"
        vllm = self.vllm_name
        if self.exact_verdict == "fail":
            return (f"{pairing}: mambaxfer's exact plan moves wrong bytes (a bug in mambaxfer; "
                    f"--semantics exact explains it)")
        fix = self._fix()
        corrupts = self.vllm_check is not None and self.vllm_check.verdict == "fail"
        does = self.vllm_does
        if does == REFUSES:
            message = " ".join(r["message"] for r in self._vllm_verdict["refusals"][:1]).rstrip(".")
            line = f"{pairing}: {vllm} refuses it ({message})"
            if fix:
                line += f"; {fix} makes vLLM accept it"
                line += f", but its reads then corrupt {self.corrupted()}" if corrupts else ""
            elif corrupts:
                line += f"; its reads would also corrupt {self.corrupted()}"
            return line
        if does == CORRUPTS:
            sim = self.vllm_check.simulation if self.vllm_check else None
            line = f"{pairing}: {vllm} corrupts {self.corrupted()}: {sim.wrong_bytes if sim else 0} bytes wrong"
            if fix:
                line += f"; fix: {fix}"
            elif "vllm-replicated-groups" in (self.vllm_check.warnings if self.vllm_check else ()):
                line += "; fix: the same TP on both sides"
            return line
        return f"{pairing}: {vllm} accepts it and moves the right bytes"

    def _fix(self) -> str:
        """vLLM's verdict's suggested fix in words ("" without one)."""
        v = self.vllm or {}
        return fix_words(v.get("suggested_kv_cache_layout"), v.get("suggested_block_size"))

    def explanation(self, limit: int = 8) -> list[str]:
        """Plain lines saying what is wrong: the first wrong byte, the damage per D rank and region,
        what the segments read, and every other problem."""
        sim = self.simulation
        if self.verdict == "skip":
            return [f"skipped: {self.reason}"]
        if self.semantics == BOTH:
            if self.verdict == "pass":
                return []
            if self.exact_verdict == "fail":
                return [self.deployment_line()] + replace(self, semantics=EXACT).explanation(limit)
            detail = self.vllm_check.explanation(limit) if self.vllm_check else []
            said_above = (f"{self.vllm_name} refuses", "fix:")
            return [self.deployment_line()] + [line for line in detail if not line.startswith(said_above)]
        lines = []
        if self.vllm and not self.vllm["accepts"]:
            lines += [f"{self.vllm['releases']} refuses this pairing {refused_when(r['code'])}: {r['message']}"
                      for r in self.vllm["refusals"]]
        fix = self._fix()
        if fix and (self.verdict != "pass" or not self._vllm_verdict["accepts"]):
            lines.append(f"fix: {fix}")
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

    def to_dict(self) -> dict[str, Any]:
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
            "deployment": self._deployment(),
        }

    def _deployment(self) -> dict[str, Any] | None:
        """BOTH: the answer, and the proof of vLLM's own reads."""
        does = self.vllm_does
        if does is None:
            return None
        check = self.vllm_check
        sim = check.simulation if check else None
        return {"mambaxfer": self.exact_verdict, "vllm": does,
                "vllm_wrong_bytes": sim.wrong_bytes if sim else 0,
                "vllm_corrupts": self._corrupted_regions(),
                "fix_block_size": self._vllm_verdict.get("suggested_block_size"),
                "summary": self.deployment_line(),
                "vllm_check": check.to_dict() if check else None}


@dataclass(frozen=True)
class CheckReport:
    semantics: str
    results: tuple[PairingResult, ...]
    seconds: float
    unchecked: tuple[str, ...] = ()     # what --max-tp left out, and why (one line per model)
    engines: Engines = Engines()

    @property
    def releases(self) -> str:
        return self.engines.releases

    def count(self, verdict: str) -> int:
        return sum(1 for r in self.results if r.verdict == verdict)

    @property
    def ok(self) -> bool:
        return self.count("fail") == 0 and self.count("refused") == 0

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_WRONG

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "semantics": self.semantics, **self.engines.to_dict(), "ok": self.ok,
                "summary": {"pairings": len(self.results), "passed": self.count("pass"),
                            "failed": self.count("fail"), "refused": self.count("refused"),
                            "skipped": self.count("skip"),
                            "seconds": round(self.seconds, 3)},
                "unchecked": list(self.unchecked),
                "results": [r.to_dict() for r in self.results]}


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


def check_memory(plan: Plan, pairing: str) -> None:
    """Refuse a simulation that would hold too much at once: one D rank's request pages, their P
    pages and pattern bytes (at or up to a fifth above the peak RSS measured)."""
    p_page, d_page = plan.page_bytes
    need = 2 * len(request_pages(plan, 0)) * (d_page + plan.prefill.tp * p_page)
    if need > MAX_SIMULATION_BYTES:
        raise UserError(f"{plan.model.name} {pairing}: simulating this request needs about {need / 2**30:.1f} GiB, "
                        f"more than check's {MAX_SIMULATION_BYTES / 2**30:.0f} GiB; use fewer --request-blocks "
                        f"(or fewer layers in the model)")


def check_plan(plan: Plan, patterns: Patterns | None = None, coalesce: bool | None = None) -> PairingResult:
    """Prove one plan byte by byte (the plan may come from anywhere, a mutated one included)."""
    start = time.perf_counter()
    sim = simulate(plan, patterns)
    if plan.model.ple_qsa is not None or plan.model.kpool_indexer is not None:
        # its PLE and indexer pages, beside the pages simulate proves
        from mambaxfer_cli.engines.vllm import families
        from mambaxfer_cli.engines.vllm.proof import indexer_caches
        p_model = plan.prefill_model or plan.model
        sim = indexer_caches.merged(sim, families.first("prove_ple", plan, p_model, part="_proof"),
                                    indexer_caches.prove(plan, p_model))
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
            raise reworded(exc, f"--pairs {pairing}: {exc}") from None
        return PairingResult(model.name, pairing.p_tp, pairing.d_tp, options.semantics, options.coalesce,
                             tp_ratio(pairing.p_tp, pairing.d_tp), "skip", 0.0, reason=str(exc))


def _job(model: ModelSpec, pairing: Pairing, options: PlanOptions, semantics: str,
         listed: bool) -> tuple[Plan | PairingResult, Plan | None]:
    """What to prove for one pairing: a plan (and under BOTH, vLLM's beside it), or a skip."""
    if semantics != BOTH:
        return plan_pairing(model, pairing, replace(options, semantics=semantics), listed), None
    exact = plan_pairing(model, pairing, replace(options, semantics=EXACT), listed)
    if isinstance(exact, PairingResult):
        return replace(exact, semantics=BOTH), None
    try:
        return exact, build_plan(model, pairing.p_tp, pairing.d_tp, replace(options, semantics=VLLM, coalesce=False))
    except UserError:     # vLLM cannot plan its own reads: it refuses the pairing
        return exact, None


def _prove(planned: Plan | PairingResult, theirs: Plan | None, semantics: str, patterns: Patterns,
           coalesce: bool) -> PairingResult:
    """BOTH: mambaxfer's exact plan and vLLM's own reads (``theirs``: None where vLLM cannot plan
    them) proved; it passes where both are right and vLLM accepts the pairing."""
    if isinstance(planned, PairingResult):
        return planned
    if semantics != BOTH:
        return check_plan(planned, patterns, coalesce)
    start = time.perf_counter()
    mine = check_plan(planned, patterns, coalesce)
    vllm = check_plan(theirs, patterns, False) if theirs is not None else None
    if mine.verdict != "pass":
        verdict = "fail"
    elif not planned.verdict.accepts:
        verdict = "refused"
    else:
        verdict = "pass" if vllm is not None and vllm.verdict == "pass" else "fail"
    return replace(mine, semantics=BOTH, verdict=verdict, exact_verdict=mine.verdict, vllm_check=vllm,
                   seconds=time.perf_counter() - start)


def check_pairing(model: ModelSpec, pairing: Pairing, options: PlanOptions,
                  patterns: Patterns | None = None, listed: bool = True,
                  semantics: str | None = None) -> PairingResult:
    """Plan and prove one pairing (``semantics``: BOTH, EXACT or VLLM; default the options')."""
    semantics = semantics or options.semantics
    planned, theirs = _job(model, pairing, options, semantics, listed)
    return _prove(planned, theirs, semantics, patterns or Patterns(), options.coalesce)


def run_check(targets: Sequence[Target], options: PlanOptions,
              on_start: Callable[[int], None] | None = None,
              on_result: Callable[[PairingResult], None] | None = None,
              semantics: str | None = None) -> CheckReport:
    """Prove every pairing of every target, every plan built first so that a user error shows up
    before any long simulation; the callbacks drive a progress display."""
    semantics = semantics or options.semantics
    if semantics not in CHECK_SEMANTICS:
        raise UserError(f"unknown semantics '{semantics}'; choose one of: {', '.join(CHECK_SEMANTICS)}")
    start = time.perf_counter()
    jobs = [(target, *_job(target.model, pairing, options, semantics, target.listed))
            for target in targets for pairing in target.pairings]
    for _, planned, _ in jobs:
        if not isinstance(planned, PairingResult):
            check_memory(planned, f"{planned.prefill.tp}:{planned.decode.tp}")
    if on_start:
        on_start(len(jobs))
    results, patterns, last_model = [], Patterns(), None
    for target, planned, theirs in jobs:
        if target.model is not last_model:
            patterns, last_model = Patterns(), target.model   # one model's pattern bytes, shared by its pairings
        result = _prove(planned, theirs, semantics, patterns, options.coalesce)
        results.append(result)
        if on_result:
            on_result(result)
    unchecked = tuple(line for target in targets for line in target.unchecked)
    return CheckReport(semantics, tuple(results), time.perf_counter() - start, unchecked, options.engines)


def targets_for(models: Iterable[ModelSpec], pairs: str | None, max_tp: int | None,
                semantics: str) -> list[Target]:
    """The pairings to prove for each model: the listed ones, or every valid one up to max_tp
    (with what that leaves out, and why)."""
    if pairs is not None and max_tp is not None:
        raise UserError("give either --pairs or --max-tp, not both")
    listed = parse_pairs(pairs) if pairs is not None else None
    if listed is None and max_tp is not None:
        within("--max-tp", max_tp, 1, MAX_TP, "deployment's TP size")
    out = []
    for model in models:
        if listed is not None:
            out.append(Target(model, listed, listed=True))
            continue
        top = max_tp or ALL_PRESETS_MAX_TP
        pairings = pairings_up_to(model, top, semantics)
        out.append(Target(model, pairings, unchecked=_left_out(model, top, semantics, pairings)))
    return out


def _left_out(model: ModelSpec, top: int, semantics: str, pairings: Sequence[Pairing]) -> tuple[str, ...]:
    """One line per kind of pairing an enumeration up to TP ``top`` leaves out, saying why."""
    lines = []
    valid = valid_tp_sizes(model, top)
    reasons: dict[str, list[int]] = {}      # each TP size without a layout, by its layout's error
    for tp in (tp for tp in range(1, top + 1) if tp not in valid):
        try:
            rank_layouts(model, tp)
            raise AssertionError(f"{model.name}: TP {tp} has a layout but is not a valid TP size")
        except UserError as exc:
            why = str(exc).removeprefix(f"{model.name}: ").split("; TP sizes that work")[0]
        reasons.setdefault(why.replace(f"TP {tp}", "TP {}", 1), []).append(tp)
    if reasons:
        said = "; ".join(why.replace("{}", ", ".join(map(str, sizes))).replace(
            "does not divide", "does not divide" if len(sizes) == 1 else "do not divide")
            for why, sizes in reasons.items())
        lines.append(f"{model.name}: not checked up to TP {top}: {said}")
    mixed = len(valid) ** 2 - len(pairings)
    if semantics != EXACT and mixed:
        lines.append(f"{model.name}: not checked, {mixed} pairing{'s' if mixed != 1 else ''} of TP sizes "
                     f"where neither divides the other (vLLM refuses them; --semantics exact proves "
                     f"mambaxfer's plans of them)")
    return tuple(lines)
