"""A conformance run's outcome: per vLLM function, agrees, differs (the first differing case, both
values and the command that reproduces mambaxfer's side) or could not be called (what changed)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mambaxfer_cli.engines.vllm.conformance.cases import Difference, CaseTally
from mambaxfer_cli.conformance.report import AGREES, DIFFERS, NO_CASE, NOT_CALLED, SCHEMA, Outcomes, result_document


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

    @property
    def name(self) -> str:
        return self.function.name

    @property
    def compares(self) -> str:
        return self.function.what

    @property
    def cases(self) -> int:
        return self.tally.cases

    @property
    def differing(self) -> int:
        return self.tally.differing

    @property
    def by_model(self) -> dict[str, list[int]]:
        return self.tally.by_model

    def to_dict(self) -> dict:
        return result_document(self, None if self.first is None else self.first.to_dict())


@dataclass
class Report(Outcomes):
    vllm_version: str
    rules: str                      # the release whose rules mambaxfer compared
    gpu: str
    models: list[str]
    max_tp: int
    results: list[FunctionResult]
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def version(self) -> str:
        return self.vllm_version

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "vllm": {"version": self.vllm_version, "rules": self.rules, "gpu": self.gpu},
                "models": list(self.models), "max_tp": self.max_tp, "ok": self.ok,
                "functions": [r.to_dict() for r in self.results], "notes": list(self.notes),
                "seconds": round(self.seconds, 3)}
