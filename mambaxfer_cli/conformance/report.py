"""A conformance run's outcome: per vLLM function, agrees, differs (the first differing case, both
values and the command that reproduces mambaxfer's side) or could not be called (what changed)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mambaxfer_cli.conformance.cases import Difference, CaseTally
from mambaxfer_cli.exits import EXIT_OK, EXIT_WRONG

SCHEMA = "mambaxfer.conformance/v1"
AGREES, DIFFERS, NOT_CALLED = "agrees", "differs", "could not be called"
NO_CASE = "no case"      # no case of the run applies (e.g. a model whose engines are not compared)


@dataclass(frozen=True)
class Function:
    """One of vLLM's functions (or one answer a few of them give together) that conformance runs."""

    name: str
    what: str            # what is compared, in a few words


@dataclass
class FunctionResult:
    function: Function
    tally: CaseTally = field(default_factory=CaseTally)
    not_called: str | None = None          # why it could not be called
    attribute: str | None = None           # the attribute it reads that the stand-in lacks
    skipped: int = 0                       # cases vLLM's own code refused before this function
    skip_reason: str | None = None

    @property
    def outcome(self) -> str:
        if self.not_called is not None:
            return NOT_CALLED
        if self.tally.differing:
            return DIFFERS
        return AGREES if self.tally.cases else NO_CASE

    @property
    def first(self) -> Difference | None:
        return self.tally.first

    def to_dict(self) -> dict:
        out = {"function": self.function.name, "compares": self.function.what, "outcome": self.outcome,
               "cases": self.tally.cases, "differing": self.tally.differing,
               "by_model": {model: {"cases": c, "differing": d} for model, (c, d) in self.tally.by_model.items()}}
        if self.skipped:
            out["skipped"] = {"cases": self.skipped, "reason": self.skip_reason}
        if self.first is not None:
            out["first_difference"] = self.first.to_dict()
        if self.not_called is not None:
            out["could_not_be_called"] = {"reason": self.not_called, "attribute": self.attribute}
        return out


@dataclass
class Report:
    vllm_version: str
    rules: str                      # the release whose rules mambaxfer compared
    gpu: str
    models: list[str]
    max_tp: int
    results: list[FunctionResult]
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.outcome in (AGREES, NO_CASE) for r in self.results)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_WRONG

    def count(self, outcome: str) -> int:
        return sum(r.outcome == outcome for r in self.results)

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "vllm": {"version": self.vllm_version, "rules": self.rules, "gpu": self.gpu},
                "models": list(self.models), "max_tp": self.max_tp, "ok": self.ok,
                "functions": [r.to_dict() for r in self.results], "notes": list(self.notes),
                "seconds": round(self.seconds, 3)}
