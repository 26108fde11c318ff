"""``check --engine sglang``: each pairing's SGLang outcome, proven on real bytes (``proof.py``): the
exact writes must land every byte right, and the bytes SGLang's get wrong must be those the verdict names."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from mambaxfer_cli.engines.sglang.drafts import Draft
from mambaxfer_cli.engines.sglang.entries import CONV, TEMPORAL
from mambaxfer_cli.engines.sglang.plan import SGLangPlan, plan
from mambaxfer_cli.engines.sglang.kv import sglang_kv_writes
from mambaxfer_cli.engines.sglang.proof import kv_bytes_wrong, outcomes, replicated_wrong
from mambaxfer_cli.render.console import tp_pairing
from mambaxfer_cli.engines.sglang.release import NIXL, SGLANG_0_5_23, Release
from mambaxfer_cli.engines.sglang.shapes import family_rule, tp_sizes
from mambaxfer_cli.engines.sglang.writes import FieldOutcome, check_side
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.planning.model import ModelSpec

# A pairing's outcome: SGLang moves the right bytes, corrupts some, routes some to the wrong
# rank, refuses, or fails every request at bootstrap; "fail": mambaxfer's own exact plan is wrong.
RIGHT, CORRUPTS, MISROUTES, REFUSED, FAILS, FAIL = "right", "corrupts", "misroutes", "refused", "fails", "fail"


@dataclass(frozen=True)
class PairingCheck:
    plan: SGLangPlan
    exact: tuple[FieldOutcome, ...]     # mambaxfer's exact writes, simulated
    sglang: tuple[FieldOutcome, ...]    # SGLang's writes, simulated
    seconds: float
    draft_wrong: int = 0                # bytes of the draft's KV pages SGLang's writes land wrong
    # The replicated items' bytes wrong per field (side and QSA states, every entry): SGLang's writes, the exact ones.
    beside: tuple[tuple[str, int], ...] = ()
    beside_exact: int = 0

    @property
    def model(self) -> str:
        return self.plan.model.name

    @property
    def pairing(self) -> str:
        return tp_pairing(self.plan.p_tp, self.plan.d_tp)

    @property
    def outcome(self) -> str:
        verdict = self.plan.verdict
        if any(o.bad for o in self.exact) or self.beside_exact:
            return FAIL
        if verdict.refusal:
            return REFUSED
        if verdict.fails:
            return FAILS
        if verdict.bad_bytes():
            return CORRUPTS
        return MISROUTES if not verdict.right else RIGHT

    def wrong(self, field: str | None = None) -> int:
        """Bytes SGLang gets wrong for one request, every SSM layer and decode rank."""
        return sum(o.bad for o in self.sglang if field in (None, o.field)) * self.plan.verdict.ssm_layers

    def exact_wrong(self) -> int:
        return sum(o.bad for o in self.exact) * self.plan.verdict.ssm_layers + self.beside_exact

    def to_dict(self) -> dict:
        verdict = self.plan.verdict
        return {"model": self.plan.model.name, "p_tp": self.plan.p_tp, "d_tp": self.plan.d_tp,
                "backend": self.plan.backend, "outcome": self.outcome, "sentence": verdict.sentence(),
                "refusal": verdict.refusal,
                "bytes_wrong": {**{f: self.wrong(f) for f in dict.fromkeys((CONV, TEMPORAL,
                                                                           *(o.field for o in self.sglang)))},
                                **dict(self.beside)},
                "kv_heads_wrong": verdict.heads_wrong, "findings": list(verdict.findings),
                "exact_bytes_wrong": self.exact_wrong(), "ssm_layers": verdict.ssm_layers,
                "writes_per_layer": len(self.plan.writes), "seconds": round(self.seconds, 3),
                "draft": self.plan.draft.to_dict() if self.plan.draft else None,
                "draft_kv_bytes_wrong": self.draft_wrong}


def check_pairing(model: ModelSpec, p_tp: int, d_tp: int, backend: str = NIXL,
                  release: Release = SGLANG_0_5_23, draft: Draft | None = None) -> PairingCheck:
    start = time.perf_counter()
    planned = plan(model, p_tp, d_tp, backend=backend, release=release, draft=draft)
    prefill, decode = check_side(planned.model, p_tp, release), check_side(planned.model, d_tp, release)
    exact = outcomes(planned.exact, prefill, decode)
    theirs = () if planned.verdict.refusal else outcomes(planned.writes, prefill, decode)
    wrong_kv = 0
    if draft is not None and not planned.verdict.refusal:    # its pages, one token, as SGLang writes them
        p_kv, d_kv = draft.side(planned.model, p_tp, 1), draft.side(planned.model, d_tp, 1)
        wrong_kv = kv_bytes_wrong(sglang_kv_writes(p_kv, d_kv, planned.head_slices), p_kv, d_kv,
                                  range(draft.band, draft.band + draft.layers))
        if bool(wrong_kv) != bool(planned.verdict.heads_wrong):
            raise AssertionError(f"{model.name} {tp_pairing(p_tp, d_tp)}: the draft's pages give {wrong_kv:,} bytes "
                                 f"wrong, the verdict {planned.verdict.heads_wrong} KV heads")
    beside = {} if planned.verdict.refusal else replicated_wrong(planned.writes, planned.decode_entries, d_tp)
    if any(beside.values()) and planned.verdict.right:
        raise AssertionError(f"{model.name} {tp_pairing(p_tp, d_tp)}: SGLang's writes land {beside} bytes of the "
                             f"replicated items wrong, where the verdict finds them right")
    beside_exact = sum(replicated_wrong(planned.exact, planned.decode_entries, d_tp).values())
    result = PairingCheck(planned, exact, theirs, time.perf_counter() - start, wrong_kv, tuple(beside.items()),
                          beside_exact)
    analytic = planned.verdict.bad_bytes()
    if result.wrong() != analytic:
        raise AssertionError(f"{model.name} {tp_pairing(p_tp, d_tp)}: the simulated bytes give {result.wrong():,} "
                             f"wrong, the verdict {analytic:,}")
    return result


@dataclass(frozen=True)
class Target:
    model: ModelSpec
    pairings: tuple[tuple[int, int], ...]
    unchecked: tuple[str, ...] = ()
    draft: Draft | None = None        # the draft's KV pool (--speculative-algorithm)


def targets(models: Iterable[ModelSpec], pairs: Sequence[tuple[int, int]] | None, max_tp: int,
            release: Release = SGLANG_0_5_23, every: bool = False) -> tuple[list[Target], list[str]]:
    """The pairings to prove per model (the listed ones, or every pair SGLang serves up to ``max_tp``);
    ``every``: a model SGLang does not serve is left out with a line, else a user error."""
    out, left_out = [], []
    for model in models:
        try:     # SGLang does not serve the model, or mambaxfer does not answer for it
            family_rule(model, release)
        except UserError as why:
            if not every:
                raise
            left_out.append(str(why).split("; mambaxfer answers")[0])
            continue
        if pairs is not None:
            for tp in itertools.chain(*pairs):
                check_side(model, tp, release)      # SGLang's refusal of a TP size
            out.append(Target(model, tuple(pairs)))
            continue
        sizes = tp_sizes(model, max_tp)
        skipped = [tp for tp in range(1, max_tp + 1) if tp not in sizes]
        lines = ((f"{model.name}: not checked at TP {', '.join(map(str, skipped))}: {release.label} does not "
                  f"serve it there",) if skipped else ())
        out.append(Target(model, tuple(itertools.product(sizes, sizes)), lines))
    return out, left_out


@dataclass(frozen=True)
class CheckReport:
    release: str
    backend: str
    results: tuple[PairingCheck, ...]
    unchecked: tuple[str, ...]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(r.outcome == RIGHT for r in self.results)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.results if r.outcome == outcome)

    def to_dict(self) -> dict:
        return {"schema": "mambaxfer.sglang-check/v1", "engine": "sglang", "release": self.release.split()[-1],
                "backend": self.backend, "ok": self.ok,
                "summary": {o: self.count(o) for o in (RIGHT, CORRUPTS, MISROUTES, REFUSED, FAILS, FAIL)},
                "pairings": [r.to_dict() for r in self.results], "unchecked": list(self.unchecked),
                "seconds": round(self.seconds, 3)}


def run(work: Sequence[Target], backend: str = NIXL, release: Release = SGLANG_0_5_23,
        on_start: Callable[[int], None] | None = None,
        on_result: Callable[[PairingCheck], None] | None = None, left_out: Sequence[str] = ()) -> CheckReport:
    start = time.perf_counter()
    jobs = [(t.model, p, d, t.draft) for t in work for p, d in t.pairings]
    if on_start:
        on_start(len(jobs))
    results = []
    for model, p_tp, d_tp, draft in jobs:
        result = check_pairing(model, p_tp, d_tp, backend, release, draft)
        results.append(result)
        if on_result:
            on_result(result)
    unchecked = (*left_out, *(line for t in work for line in t.unchecked))
    return CheckReport(release.label, backend, tuple(results), unchecked, time.perf_counter() - start)


