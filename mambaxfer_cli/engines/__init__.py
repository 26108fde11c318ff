"""The serving engines mambaxfer knows: one package each under ``engines/``, found by name.

An engine's package fills one ``ServingEngine`` (its ``ENGINE``): the rules of the engine that
run P and D, behind the few questions the commands ask of it. Everything else of the engine (its
releases, geometry, handshake verdict, reads and descriptor IDs, command-line reader, conformance
probe) stays inside its package; the core (``planning/``, ``readers/``) imports none of it.
Adding an engine is adding a package here with an ``ENGINE`` (``--engine`` lists it), or installing a
distribution that declares one under the entry-point group ``mambaxfer.engines`` (name: module with
an ``ENGINE``), looked up only when ``--engine`` names no package here.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Mapping, Protocol

from mambaxfer_cli.errors import UserError

if TYPE_CHECKING:
    from pathlib import Path

    from mambaxfer_cli.cli.execute_cmd import PeerArgs
    from mambaxfer_cli.cli.options import EngineArgs, ModelArgs, OutputArgs, PairArgs, RequestArgs, RunArgs
    from mambaxfer_cli.render.bench_view import BenchProgress
    from mambaxfer_cli.render.report import Report

DEFAULT = "vllm"
ENTRY_POINTS = "mambaxfer.engines"


class PreparedBench(Protocol):
    """An engine's bench, planned: its progress steps, its devices, and the run that measures it."""

    @property
    def steps(self) -> int: ...

    @property
    def devices(self) -> list[tuple[str, int]]: ...

    def measure(self, run: RunArgs, view: BenchProgress) -> dict[str, object]: ...


class ServingEngine(Protocol):
    """What the commands ask of a serving engine: each command's whole option groups in, the
    report ``finish`` says out."""

    name: str                   # what ``--engine`` takes: ``vllm``
    title: str                  # how answers name it: ``vLLM``

    @property
    def unanswered(self) -> str | None:
        """Why the commands do not answer for this engine yet (None: they do)."""

    def release_names(self) -> tuple[str, ...]:
        """The releases mambaxfer has rules for, oldest first."""

    def option_help(self) -> dict[str, str]:
        """The help of the options that state this engine's facts, by option (``vllm_version``)."""

    def option_values(self) -> dict[str, tuple[str, ...]]:
        """The values the shell's completion offers for the options that name this engine's
        facts, by option (``gpu``: the GPUs it knows)."""

    def plan(self, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs,
             output: OutputArgs, d_rank: int | None, show: str | None) -> Report: ...

    def check(self, model: ModelArgs, engines: EngineArgs, request: RequestArgs, output: OutputArgs,
              pairs: str | None, max_tp: int | None) -> Report: ...

    def check_beside(self, other: ServingEngine, model: ModelArgs, engines: EngineArgs, request: RequestArgs,
                     output: OutputArgs, pairs: str | None, max_tp: int | None) -> Report | None:
        """``check --engine a,b``: both engines' checks in one report (None: this engine has none with ``other``)."""

    def inspect(self, model: ModelArgs, engines: EngineArgs, tp: str) -> Report:
        """``tp``: the TP sizes, comma-separated (``--tp``)."""

    def runs(self, p_text: str, d_text: str, environ: Mapping[str, str]) -> bool:
        """Whether both command lines run this engine's server (preflight without --engine);
        ``environ``: the environment the lines start with."""

    def preflight(self, engines: EngineArgs, output: OutputArgs, p_text: str, d_text: str, p_origin: str,
                  d_origin: str, environ: Mapping[str, str]) -> Report: ...

    def execute(self, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run: RunArgs,
                peers: PeerArgs, output: OutputArgs, blocks: int | None, plan_file: Path | None) -> Report: ...

    def bench(self, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs, run: RunArgs,
              sweep: str, chart: Path | None) -> Report: ...

    def prepare_bench(self, model: ModelArgs, pair: PairArgs, engines: EngineArgs, request: RequestArgs,
                      run: RunArgs, sweep: str, chart: Path | None) -> PreparedBench:
        """The bench planned, every refusal said, before any rank starts (beside another engine)."""

    def bench_beside(self, other: ServingEngine, model: ModelArgs, pair: PairArgs, engines: EngineArgs,
                     request: RequestArgs, run: RunArgs, sweep: str, chart: Path | None) -> Report | None:
        """``bench --engine a,b``: both engines in one run (None: this engine has none with ``other``)."""

    def conformance(self, model: ModelArgs, engines: EngineArgs, max_tp: int) -> Report:
        """The installed engine's own functions against mambaxfer's, on --model or --all-presets
        (with vLLM, under --speculative-config too)."""

    def models(self) -> Report:
        """``models --engine NAME``: the presets this engine serves, and why not the rest."""


def submodules(package: str) -> Callable[[str], ModuleType]:
    """A package's ``__getattr__`` that imports a submodule when it is first named (an engine's
    ``commands.plan``), so naming the engine imports no command's body."""

    def imported(name: str) -> ModuleType:
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.{name}":
                raise
            raise AttributeError(name) from None

    return imported


def described() -> str:
    """For help: each engine with the releases it has rules for, ``vllm (vLLM 0.33, 0.34)``."""
    return ", ".join(f"{e.name} ({e.title} {', '.join(e.release_names())})" for e in map(engine, names()))


def names() -> tuple[str, ...]:
    """The engines' names, from their packages (none is imported)."""
    return tuple(sorted(info.name for info in pkgutil.iter_modules(__path__) if info.ispkg))


@lru_cache(maxsize=None)
def installed() -> dict[str, str]:
    """The engines installed distributions declare (``mambaxfer.engines``): name -> module; a
    package here wins over one of the same name."""
    from importlib.metadata import entry_points

    return {e.name: e.module for e in entry_points(group=ENTRY_POINTS) if e.name not in names()}


def known(named: list[str]) -> bool:
    """Whether mambaxfer knows every engine ``named`` (the installed ones looked up only when needed)."""
    return set(named) <= set(names()) or set(named) <= set(names()) | set(installed())


@lru_cache(maxsize=None)
def engine(name: str = DEFAULT) -> ServingEngine:
    """The engine ``--engine`` names."""
    if name in names():
        module = f"{__name__}.{name}"
    elif name in installed():
        module = installed()[name]
    else:
        raise UserError(f"--engine: unknown serving engine '{name}'; mambaxfer knows "
                        f"{', '.join(names() + tuple(sorted(installed())))}")
    found: ServingEngine = importlib.import_module(module).ENGINE
    return found


def chosen(text: str) -> tuple[ServingEngine, ...]:
    """The engines ``--engine`` names (comma-separated: several, side by side), each one the
    commands answer for."""
    named = [name.strip().lower() for name in text.split(",")]
    if len(set(named)) != len(named) or not known(named):
        engine(text)     # an engine mambaxfer does not know: one line
    found = tuple(engine(name) for name in named)
    for each in found:
        if each.unanswered is not None:
            raise UserError(each.unanswered)
    return found


def one(text: str) -> ServingEngine:
    """The one engine a command that takes one runs."""
    found = chosen(text)
    if len(found) > 1:
        engine(text)
    return found[0]


def beside(text: str, ask: Callable[[ServingEngine, ServingEngine], Report | None]) -> Report:
    """Several engines side by side (``check``, ``bench --engine a,b``): the report one of the two
    gives beside the other (``ask(one, other)``)."""
    found = chosen(text)
    if len(found) == 2:
        report = ask(*found) or ask(*reversed(found))
        if report is not None:
            return report
    engine(text)     # engines that do not go together: one line
    raise AssertionError(text)
