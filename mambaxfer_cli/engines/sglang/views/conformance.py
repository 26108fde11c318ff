"""The rich rendering of ``conformance --engine sglang`` (a table of SGLang's functions, each
difference with both values), its progress on stderr, and its JUnit XML."""

from __future__ import annotations

import json
import sys
import time
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mambaxfer_cli.engines.sglang.conformance import (
    AGREES, DIFFERS, IMPORT_STEP, NOT_CALLED, STEPS, FunctionResult, Report, describe, plain,
)

WHOLE = 200         # characters a value is shown whole up to; a longer one from where the two part
LONGEST = 600       # characters of one value shown at most (--format json has it whole)


def outcome_text(result: FunctionResult) -> Text:
    if result.outcome == AGREES:
        return Text("✓ agrees", style="green")
    if result.outcome == DIFFERS:
        return Text(f"✗ differs ({result.differing})", style="bold red")
    return Text("! could not be called", style="bold yellow")


def heading(report: Report) -> Text:
    return Text(f"mambaxfer conformance: SGLang {report.sglang_version} against mambaxfer's rules for "
                f"{report.rules}", style="bold")


def summary_table(report: Report) -> Table:
    table = Table()
    table.add_column("SGLang function", no_wrap=True)
    table.add_column("cases", justify="right")
    table.add_column("outcome", no_wrap=True)
    for result in report.results:
        table.add_row(result.name, f"{result.cases:,}", outcome_text(result))
    return table


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def where_they_part(theirs: Any, ours: Any) -> tuple[str, Any, Any]:
    """Two values as a panel shows them: whole when short; else, into lists while they are long,
    the index path of the first element that differs (``[3][0]``) and both elements there."""
    path = ""
    while isinstance(theirs, list) and isinstance(ours, list) and max(len(_text(theirs)), len(_text(ours))) > WHOLE:
        common = min(len(theirs), len(ours))
        index = next((i for i in range(common) if theirs[i] != ours[i]), common)
        if index == common:        # one goes on where the other ends
            return f"{path}[{index}:]", theirs[index:], ours[index:]
        path += f"[{index}]"
        theirs, ours = theirs[index], ours[index]
    return path, theirs, ours


def _clipped(value: Any) -> str:
    text = _text(value)
    return text if len(text) <= LONGEST else f"{text[:LONGEST]} … ({len(text):,} characters)"


def difference_panel(result: FunctionResult) -> Panel:
    first = result.first
    assert first is not None, "a function that differs has a first difference"
    path, theirs, ours = where_they_part(plain(first["sglang"]), plain(first["mambaxfer"]))
    lines = [Text(f"{result.differing} of {result.cases} cases differ; the first:", style="bold"),
             Text(describe(first["case"]))]
    if path:
        lines.append(Text(f"the values first part at {path} (--format json has them whole):", style="dim"))
    lines += [Text.assemble(("SGLang:    ", "bold"), _clipped(theirs)),
              Text.assemble(("mambaxfer: ", "bold"), _clipped(ours))]
    models = [f"{model} {d}/{c}" for model, (c, d) in result.by_model.items() if d]
    rest = (result.differing - sum(d for _, d in result.by_model.values()),
            result.cases - sum(c for c, _ in result.by_model.values()))
    if rest[0]:     # stand-ins and inputs of no model
        models.append(f"other inputs {rest[0]}/{rest[1]}")
    lines.append(Text("differing cases by model: " + ", ".join(models), style="dim"))
    return Panel(Group(*lines), title=f"✗ {result.name}", title_align="left", border_style="red")


def not_called_panel(result: FunctionResult) -> Panel:
    assert result.not_called is not None, "a function not called says why"
    lines = [Text(result.not_called)]
    if result.attribute:
        lines.append(Text(f"the attribute: {result.attribute}", style="bold"))
    lines.append(Text("mambaxfer's call of this SGLang function needs updating (please report it with the "
                      "SGLang version)", style="dim"))
    return Panel(Group(*lines), title=f"! {result.name} could not be called", title_align="left",
                 border_style="yellow")


def footer(report: Report) -> Text:
    counts = [f"{report.count(AGREES)} agree"]
    if report.count(DIFFERS):
        counts.append(f"{report.count(DIFFERS)} differ")
    if report.count(NOT_CALLED):
        counts.append(f"{report.count(NOT_CALLED)} could not be called")
    cases = sum(r.cases for r in report.results)
    models = len(report.models)
    return Text(f"{len(report.results)} functions, {cases:,} cases, {models} model{'' if models == 1 else 's'} up "
                f"to TP {report.max_tp} in {report.seconds:.1f} s: {', '.join(counts)}",
                style="bold green" if report.ok else "bold red")


def render_report(report: Report) -> list:
    parts: list = [heading(report), summary_table(report)]
    for result in report.results:
        if result.outcome == DIFFERS:
            parts.append(difference_panel(result))
        elif result.outcome == NOT_CALLED:
            parts.append(not_called_panel(result))
    parts.extend(Text(f"note: {note}", style="dim") for note in report.notes)
    parts.append(footer(report))
    return parts


@contextmanager
def progress() -> Iterator[tuple[Callable[[int], None], Callable[[str], None]]]:
    """Progress on stderr: a rich bar on a terminal, else a line per step as it ends."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    if not err.is_terminal:
        started = time.monotonic()

        def start(total: int) -> None:
            sys.stderr.write(f"conformance: {IMPORT_STEP}, then {total - 1} steps of comparison\n")

        def done(step: str) -> None:
            sys.stderr.write(f"conformance: {step} done ({time.monotonic() - started:.1f} s)\n")

        yield start, done
        return
    order = (IMPORT_STEP, *STEPS)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task("importing SGLang", total=None)

        def start(total: int) -> None:
            bar.update(task, total=total)

        def done(step: str) -> None:
            following = order.index(step) + 1 if step in order else len(order)
            bar.update(task, advance=1, description=f"comparing {order[following]}" if following < len(order)
                       else "done")

        yield start, done


def junit_xml(report: Report) -> str:
    """One test case per SGLang function; a difference or a call that failed is a failure."""
    failed = [r for r in report.results if r.outcome != AGREES]
    name = f"mambaxfer conformance SGLang {report.sglang_version}"
    root = ET.Element("testsuites", name=name, tests=str(len(report.results)), failures=str(len(failed)),
                      errors="0", time=f"{report.seconds:.3f}")
    suite = ET.SubElement(root, "testsuite", name=name, tests=str(len(report.results)), failures=str(len(failed)),
                          errors="0", time=f"{report.seconds:.3f}")
    for result in report.results:
        case = ET.SubElement(suite, "testcase", classname=f"mambaxfer.conformance.sglang-{report.sglang_version}",
                             name=result.name)
        if result.outcome == DIFFERS:
            first = result.first
            assert first is not None, "a function that differs has a first difference"
            failure = ET.SubElement(case, "failure", type="mambaxfer.conformance",
                                    message=f"differs in {result.differing} of {result.cases} cases")
            failure.text = "\n".join([f"first: {describe(first['case'])}", f"SGLang: {_text(plain(first['sglang']))}",
                                      f"mambaxfer: {_text(plain(first['mambaxfer']))}"])
        elif result.outcome == NOT_CALLED:
            failure = ET.SubElement(case, "failure", type="mambaxfer.conformance", message="could not be called")
            failure.text = result.not_called
        else:
            out = ET.SubElement(case, "system-out")
            out.text = f"agrees in {result.cases} cases ({result.compares})"
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
