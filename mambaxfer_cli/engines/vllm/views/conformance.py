"""How a vLLM conformance run looks (its words for the shared view), and its progress on stderr."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from mambaxfer_cli.engines.vllm.conformance.report import FunctionResult, Report
from mambaxfer_cli.render import conformance_view
from mambaxfer_cli.render.conformance_view import Looks, Shown, as_text
from mambaxfer_cli.render.console import tp_pairing
from mambaxfer_cli.render.run_view import bar


def shown(result: FunctionResult) -> Shown:
    first = result.first
    assert first is not None, "a function that differs has a first difference"
    return Shown(first.case.describe(), as_text(first.vllm), as_text(first.mambaxfer), reproduce=first.case.command())


def looks(report: Report) -> Looks:
    return Looks("vLLM", f"mambaxfer conformance: vLLM {report.vllm_version} against mambaxfer's rules for vLLM "
                         f"{report.rules}, on {report.gpu}",
                 "mambaxfer's stand-in for this vLLM needs updating (please report it with the vLLM version)",
                 shown, shown, junit_skipped=True)


def render_report(report: Report) -> list:
    return conformance_view.render_report(report, looks(report))


def junit_xml(report: Report) -> str:
    return conformance_view.junit_xml(report, looks(report))


@contextmanager
def progress() -> Iterator[tuple[Callable[[int], None], Callable[[str, int, int], None]]]:
    """Progress on stderr: a rich bar on a terminal, else a line per model as it finishes."""
    started = time.monotonic()
    last: list[str] = []      # the model whose line is owed

    def finished(model: str) -> None:
        sys.stderr.write(f"conformance: {model} done ({time.monotonic() - started:.1f} s)\n")

    with bar("comparing {task.description}") as update:
        def start(total: int) -> None:
            if update is not None:
                update(total=total)
            else:
                sys.stderr.write(f"conformance: {total} pairings to compare\n")

        def done(model: str, p_tp: int, d_tp: int) -> None:
            if update is not None:
                update(advance=1, description=f"{model} {tp_pairing(p_tp, d_tp)}")
            elif last and last[0] != model:
                finished(last[0])
            last[:] = [model]

        yield start, done
        if last and update is None:
            finished(last[0])
