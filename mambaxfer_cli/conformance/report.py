"""What both engines' conformance runs share: the schema, outcomes, verdict and document parts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG

SCHEMA = "mambaxfer.conformance/v1"
AGREES, DIFFERS, NOT_CALLED = "agrees", "differs", "could not be called"
NO_CASE = "no case"      # no case of the run applies (e.g. a model whose engines are not compared)


def plain(value: Any) -> Any:
    """A value as JSON holds it (tuples as lists)."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def result_document(result: Any, first: dict | None) -> dict[str, Any]:
    """One function's part of the document (``first``: its first difference, as the engine says it)."""
    out: dict[str, Any] = {"function": result.name, "compares": result.compares, "outcome": result.outcome,
                           "cases": result.cases, "differing": result.differing,
                           "by_model": {m: {"cases": c, "differing": d} for m, (c, d) in result.by_model.items()}}
    if result.skipped:
        out["skipped"] = {"cases": result.skipped, "reason": result.skip_reason}
    if first is not None:
        out["first_difference"] = first
    if result.not_called is not None:
        out["could_not_be_called"] = {"reason": result.not_called, "attribute": result.attribute}
    return out


@dataclass(kw_only=True)
class Tally:
    """One function's comparisons so far."""

    cases: int = 0
    differing: int = 0
    first: Any = None                   # the first differing case, as the engine keeps it
    by_model: dict[str, list[int]] = field(default_factory=dict)   # model: [cases, differing]

    def count(self, model: str | None, same: bool) -> bool:
        """Count one case (of ``model``, where it has one); whether it is the first to differ."""
        self.cases += 1
        counts = self.by_model.setdefault(model, [0, 0]) if model is not None else [0, 0]
        counts[0] += 1
        if not same:
            self.differing += 1
            counts[1] += 1
        return not same and self.first is None


@dataclass(kw_only=True)
class Result(Tally):
    """One function's outcome: its tally, why it could not be called, the cases left out."""

    not_called: str | None = None       # why it could not be called
    attribute: str | None = None        # the attribute it reads that is not there
    skipped: int = 0                    # cases the engine's own code refused before this function
    skip_reason: str | None = None
    EMPTY: ClassVar[str] = NO_CASE      # the outcome where no case reached it

    @property
    def outcome(self) -> str:
        if self.not_called is not None:
            return NOT_CALLED
        if self.differing:
            return DIFFERS
        return AGREES if self.cases else self.EMPTY


class Outcomes:
    """A run's verdict from its functions' outcomes, and its document (the engine's part: ``engine_document``)."""

    results: Sequence[Any]
    models: list[str]
    max_tp: int
    notes: list[str]
    seconds: float

    @property
    def ok(self) -> bool:
        return all(r.outcome in (AGREES, NO_CASE) for r in self.results)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_WRONG

    def count(self, outcome: str) -> int:
        return sum(r.outcome == outcome for r in self.results)

    def engine_document(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **self.engine_document(), "models": list(self.models), "max_tp": self.max_tp,
                "ok": self.ok, "functions": [r.to_dict() for r in self.results], "notes": list(self.notes),
                "seconds": round(self.seconds, 3)}
