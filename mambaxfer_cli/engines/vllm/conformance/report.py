"""A conformance run's outcome: per vLLM function, agrees, differs (the first differing case, both
values and the command that reproduces mambaxfer's side) or could not be called (what changed)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mambaxfer_cli.engines.vllm.conformance.cases import CaseTally
from mambaxfer_cli.conformance.report import Outcomes, Result, result_document


@dataclass(frozen=True)
class Function:
    """One of vLLM's functions (or one answer a few of them give together) that conformance runs."""

    name: str
    what: str            # what is compared, in a few words


@dataclass
class FunctionResult(Result, CaseTally):
    function: Function

    @property
    def name(self) -> str:
        return self.function.name

    @property
    def compares(self) -> str:
        return self.function.what

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

    def engine_document(self) -> dict:
        return {"vllm": {"version": self.vllm_version, "rules": self.rules, "gpu": self.gpu}}
