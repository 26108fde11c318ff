"""What both engines' conformance reports draw alike; each engine's view gives its own words
(``Looks``)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any, Callable

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from mambaxfer_cli.conformance.report import AGREES, DIFFERS, NO_CASE, NOT_CALLED
from mambaxfer_cli.render.preflight_view import junit_text


@dataclass(frozen=True)
class Shown:
    """A function's first differing case as a report shows it."""

    case: str                 # the case, described
    theirs: str               # the engine's value, as text
    ours: str                 # mambaxfer's
    note: str = ""            # a line before the values (where long values part)
    reproduce: str = ""       # the command that shows mambaxfer's side


@dataclass(frozen=True)
class Looks:
    """What one engine's conformance report says in its own words."""

    engine: str                          # vLLM, SGLang
    heading: str
    update: str                          # what a function that could not be called asks for
    panel: Callable[[Any], Shown]        # the first difference in a panel
    whole: Callable[[Any], Shown]        # in JUnit XML (values whole)
    junit_skipped: bool = False          # the suite counts functions with no case


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def outcome_text(result: Any) -> Text:
    if result.outcome == DIFFERS:
        return Text(f"✗ differs ({result.differing})", style="bold red")
    text, style = {AGREES: ("✓ agrees", "green"), NO_CASE: ("– no case", "dim")}.get(
        result.outcome, ("! could not be called", "bold yellow"))
    return Text(text, style=style)


def summary_table(report: Any, looks: Looks) -> Table:
    table = Table()
    table.add_column(f"{looks.engine} function", no_wrap=True)
    table.add_column("cases", justify="right")
    table.add_column("outcome", no_wrap=True)
    for result in report.results:
        table.add_row(result.name, f"{result.cases:,}", outcome_text(result))
    return table


def difference_panel(result: Any, looks: Looks) -> Panel:
    shown = looks.panel(result)
    lines = [Text(f"{result.differing} of {result.cases} cases differ; the first:", style="bold"), Text(shown.case)]
    if shown.note:
        lines.append(Text(shown.note, style="dim"))
    lines += [Text.assemble((f"{looks.engine}:".ljust(11), "bold"), shown.theirs),
              Text.assemble(("mambaxfer: ", "bold"), shown.ours)]
    if shown.reproduce:
        lines.append(Text.assemble(("mambaxfer's side: ", "dim"), shown.reproduce))
    models = [f"{model} {d}/{c}" for model, (c, d) in result.by_model.items() if d]
    rest = (result.differing - sum(d for _, d in result.by_model.values()),
            result.cases - sum(c for c, _ in result.by_model.values()))
    if rest[0]:     # stand-ins and inputs of no model
        models.append(f"other inputs {rest[0]}/{rest[1]}")
    lines.append(Text("differing cases by model: " + ", ".join(models), style="dim"))
    return Panel(Group(*lines), title=f"✗ {result.name}", title_align="left", border_style="red")


def not_called_panel(result: Any, looks: Looks) -> Panel:
    assert result.not_called is not None, "a function not called says why"
    lines = [Text(result.not_called)]
    if result.attribute:
        lines.append(Text(f"the attribute: {result.attribute}", style="bold"))
    lines.append(Text(looks.update, style="dim"))
    return Panel(Group(*lines), title=f"! {result.name} could not be called", title_align="left",
                 border_style="yellow")


def footer(report: Any) -> Text:
    counts = [f"{report.count(AGREES)} agree"] + [
        f"{report.count(outcome)} {said}" for outcome, said in
        ((DIFFERS, "differ"), (NOT_CALLED, "could not be called"), (NO_CASE, "with no case")) if report.count(outcome)]
    cases = sum(r.cases for r in report.results)
    models = len(report.models)
    return Text(f"{len(report.results)} functions, {cases:,} cases, {models} model{'' if models == 1 else 's'} up "
                f"to TP {report.max_tp} in {report.seconds:.1f} s: {', '.join(counts)}",
                style="bold green" if report.ok else "bold red")


def render_report(report: Any, looks: Looks) -> list:
    parts: list = [Text(looks.heading, style="bold"), summary_table(report, looks)]
    for result in report.results:
        if result.outcome == DIFFERS:
            parts.append(difference_panel(result, looks))
        elif result.outcome == NOT_CALLED:
            parts.append(not_called_panel(result, looks))
    for result in report.results:
        if result.skipped:
            parts.append(Text(f"– {result.name}: {result.skipped} cases not compared: {result.skip_reason}",
                              style="yellow"))
    parts.extend(Text(f"note: {note}", style="dim") for note in report.notes)
    parts.append(footer(report))
    return parts


def junit_xml(report: Any, looks: Looks) -> str:
    """One test case per function of the engine; a difference or a call that failed is a failure."""
    failed = [r for r in report.results if r.outcome in (DIFFERS, NOT_CALLED)]
    name = f"mambaxfer conformance {looks.engine} {report.version}"
    attrs = {"name": name, "tests": str(len(report.results)), "failures": str(len(failed)), "errors": "0"}
    root = ET.Element("testsuites", {**attrs, "time": f"{report.seconds:.3f}"})
    if looks.junit_skipped:
        attrs["skipped"] = str(sum(r.outcome == NO_CASE for r in report.results))
    suite = ET.SubElement(root, "testsuite", {**attrs, "time": f"{report.seconds:.3f}"})
    for result in report.results:
        case = ET.SubElement(suite, "testcase", classname=f"mambaxfer.conformance.{looks.engine.lower()}-"
                             f"{report.version}", name=result.name)
        if result.outcome == DIFFERS:
            shown = looks.whole(result)
            failure = ET.SubElement(case, "failure", type="mambaxfer.conformance",
                                    message=f"differs in {result.differing} of {result.cases} cases")
            failure.text = "\n".join([f"first: {shown.case}", f"{looks.engine}: {shown.theirs}",
                                      f"mambaxfer: {shown.ours}"]
                                     + ([f"reproduce: {shown.reproduce}"] if shown.reproduce else []))
        elif result.outcome == NOT_CALLED:
            failure = ET.SubElement(case, "failure", type="mambaxfer.conformance", message="could not be called")
            failure.text = result.not_called
        elif result.outcome == NO_CASE:
            ET.SubElement(case, "skipped", message="no case of this run applies to it")
        else:
            out = ET.SubElement(case, "system-out")
            out.text = f"agrees in {result.cases} cases ({result.compares})"
    return junit_text(root)
