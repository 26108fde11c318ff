"""The rich rendering of a conformance run (a table per function, each difference explained),
its progress on stderr, and its JUnit XML."""

from __future__ import annotations

import json
import sys
import time
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from typing import Callable, Iterator

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mambaxfer_cli.conformance.report import AGREES, DIFFERS, NO_CASE, NOT_CALLED, FunctionResult, Report


def outcome_text(result: FunctionResult) -> Text:
    if result.outcome == AGREES:
        return Text("✓ agrees", style="green")
    if result.outcome == DIFFERS:
        return Text(f"✗ differs ({result.tally.differing})", style="bold red")
    if result.outcome == NO_CASE:
        return Text("– no case", style="dim")
    return Text("! could not be called", style="bold yellow")


def heading(report: Report) -> Text:
    return Text(f"mambaxfer conformance: vLLM {report.vllm_version} against mambaxfer's rules for vLLM "
                f"{report.rules}, on {report.gpu}", style="bold")


def summary_table(report: Report) -> Table:
    table = Table()
    table.add_column("vLLM function", no_wrap=True)
    table.add_column("cases", justify="right")
    table.add_column("outcome", no_wrap=True)
    for result in report.results:
        table.add_row(result.function.name, f"{result.tally.cases:,}", outcome_text(result))
    return table


def _as_text(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def difference_panel(result: FunctionResult) -> Panel:
    first = result.first
    assert first is not None, "a function that differs has a first difference"
    lines = [Text(f"{result.tally.differing} of {result.tally.cases} cases differ; the first:", style="bold"),
             Text(first.case.describe()),
             Text.assemble(("vLLM:      ", "bold"), _as_text(first.vllm)),
             Text.assemble(("mambaxfer: ", "bold"), _as_text(first.mambaxfer)),
             Text.assemble(("mambaxfer's side: ", "dim"), first.case.command())]
    models = [f"{model} {d}/{c}" for model, (c, d) in result.tally.by_model.items() if d]
    lines.append(Text("differing cases by model: " + ", ".join(models), style="dim"))
    return Panel(Group(*lines), title=f"✗ {result.function.name}", title_align="left", border_style="red")


def not_called_panel(result: FunctionResult) -> Panel:
    assert result.not_called is not None, "a function not called says why"
    lines = [Text(result.not_called)]
    if result.attribute:
        lines.append(Text(f"the attribute: {result.attribute}", style="bold"))
    lines.append(Text("mambaxfer's stand-in for this vLLM needs updating (please report it with the vLLM "
                      "version)", style="dim"))
    return Panel(Group(*lines), title=f"! {result.function.name} could not be called", title_align="left",
                 border_style="yellow")


def footer(report: Report) -> Text:
    n = len(report.results)
    counts = [f"{report.count(AGREES)} agree"]
    if report.count(DIFFERS):
        counts.append(f"{report.count(DIFFERS)} differ")
    if report.count(NOT_CALLED):
        counts.append(f"{report.count(NOT_CALLED)} could not be called")
    if report.count(NO_CASE):
        counts.append(f"{report.count(NO_CASE)} with no case")
    cases = sum(r.tally.cases for r in report.results)
    return Text(f"{n} functions, {cases:,} cases, {len(report.models)} model{'' if len(report.models) == 1 else 's'} "
                f"up to TP {report.max_tp} in {report.seconds:.1f} s: {', '.join(counts)}",
                style="bold green" if report.ok else "bold red")


def render_report(report: Report) -> list:
    parts: list = [heading(report), summary_table(report)]
    for result in report.results:
        if result.outcome == DIFFERS:
            parts.append(difference_panel(result))
        elif result.outcome == NOT_CALLED:
            parts.append(not_called_panel(result))
    for result in report.results:
        if result.skipped:
            parts.append(Text(f"– {result.function.name}: {result.skipped} cases not compared: {result.skip_reason}",
                              style="yellow"))
    parts.extend(Text(f"note: {note}", style="dim") for note in report.notes)
    parts.append(footer(report))
    return parts


@contextmanager
def progress() -> Iterator[tuple[Callable[[int], None], Callable[[str, int, int], None]]]:
    """Progress on stderr: a rich bar on a terminal, else a line per model as it finishes."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    if not err.is_terminal:
        started = time.monotonic()
        last: list[str] = []

        def start(total: int) -> None:
            sys.stderr.write(f"conformance: {total} pairings to compare\n")

        def done(model: str, p_tp: int, d_tp: int) -> None:
            if last and last[0] != model:
                sys.stderr.write(f"conformance: {last[0]} done ({time.monotonic() - started:.1f} s)\n")
            last[:] = [model]

        yield start, done
        if last:
            sys.stderr.write(f"conformance: {last[0]} done ({time.monotonic() - started:.1f} s)\n")
        return
    with Progress(TextColumn("comparing {task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        task = bar.add_task("", total=None)

        def start(total: int) -> None:
            bar.update(task, total=total)

        def done(model: str, p_tp: int, d_tp: int) -> None:
            bar.update(task, advance=1, description=f"{model} P{p_tp}/D{d_tp}")

        yield start, done


def junit_xml(report: Report) -> str:
    """One test case per vLLM function; a difference or a call that failed is a failure."""
    failed = [r for r in report.results if r.outcome in (DIFFERS, NOT_CALLED)]
    skipped = sum(r.outcome == NO_CASE for r in report.results)
    name = f"mambaxfer conformance vLLM {report.vllm_version}"
    root = ET.Element("testsuites", name=name, tests=str(len(report.results)), failures=str(len(failed)),
                      errors="0", time=f"{report.seconds:.3f}")
    suite = ET.SubElement(root, "testsuite", name=name, tests=str(len(report.results)), failures=str(len(failed)),
                          errors="0", skipped=str(skipped), time=f"{report.seconds:.3f}")
    for result in report.results:
        case = ET.SubElement(suite, "testcase", classname=f"mambaxfer.conformance.vllm-{report.vllm_version}",
                             name=result.function.name)
        if result.outcome == DIFFERS:
            first = result.first
            assert first is not None, "a function that differs has a first difference"
            failure = ET.SubElement(case, "failure", type="mambaxfer.conformance",
                                    message=f"differs in {result.tally.differing} of {result.tally.cases} cases")
            failure.text = "\n".join([f"first: {first.case.describe()}", f"vLLM: {_as_text(first.vllm)}",
                                      f"mambaxfer: {_as_text(first.mambaxfer)}", f"reproduce: {first.case.command()}"])
        elif result.outcome == NOT_CALLED:
            failure = ET.SubElement(case, "failure", type="mambaxfer.conformance", message="could not be called")
            failure.text = result.not_called
        elif result.outcome == NO_CASE:
            ET.SubElement(case, "skipped", message="no case of this run applies to it")
        else:
            out = ET.SubElement(case, "system-out")
            out.text = f"agrees in {result.tally.cases} cases ({result.function.what})"
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
