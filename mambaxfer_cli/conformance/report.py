"""What both engines' conformance runs share: the schema, outcomes, verdict and document parts."""

from __future__ import annotations

from typing import Any, Sequence

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


class Outcomes:
    """A run's verdict from its functions' outcomes (``results``, each with an ``outcome``)."""

    results: Sequence[Any]

    @property
    def ok(self) -> bool:
        return all(r.outcome in (AGREES, NO_CASE) for r in self.results)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_WRONG

    def count(self, outcome: str) -> int:
        return sum(r.outcome == outcome for r in self.results)
