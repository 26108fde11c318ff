"""What both engines' preflight reports draw alike, JUnit's first case included."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any, Iterator, Sequence

from rich.table import Table
from rich.text import Text

from mambaxfer_cli.exits import EXIT_OK
from mambaxfer_cli.preflight.report import Field, Report, quote_lines

OK, BAD = Text("✓", style="green"), Text("✗", style="bold red")


def cell_text(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "on" if v else "off"
    return str(v)


def titled_table(title: str, columns: tuple[str, ...]) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold")
    for name in columns:
        table.add_column(name, overflow="fold", justify="left")
    return table


def model_origin(named: str, model) -> str:
    """Where the model a serve line names was read from: a preset, or its config's file."""
    from mambaxfer_cli.readers.model_source import preset_for_source, preset_names

    if model.name in preset_names() and named in (model.name, model.source) or preset_for_source(named) == model.name:
        return "" if named == model.name else f" ({model.name} preset)"
    return "" if model.source == named else f" ({model.source})"


def fields_table(title: str, fields: list[Field]) -> Table:
    table = titled_table(title, ("field", "P", "D", ""))
    for f in fields:
        if f.name == "model":    # often a long path: named in full above the tables
            table.add_row(f.name, "as above", "the same" if f.agree else "another", OK if f.agree else BAD)
            continue
        table.add_row(f.name, cell_text(f.prefill), cell_text(f.decode), OK if f.agree else BAD)
    return table


def sides(report: Report) -> tuple[tuple[str, Any], tuple[str, Any]]:
    a: Any = report.assessment
    return ("P", a.prefill), ("D", a.decode)


def opening(report: Report, answered_for: str) -> Iterator[object]:
    """The headline, each side's model and where it was read from, and what answered."""
    yield Text(report.headline(), style="bold green" if report.exit_code == EXIT_OK else "bold red")
    yield Text("")
    for name, e in sides(report):
        yield Text(f"{name} model: {e.line.model}{model_origin(e.line.model, e.model)}")
    yield Text(f"answered for {answered_for}")


def refusal_lines(label: str, refusals: Sequence[Any], accepts: str) -> Iterator[object]:
    yield Text(f"{label}'s verdict", style="bold")
    if not refusals:
        yield Text(f"  accepts: {accepts}", style="green")
    for r in refusals:
        yield Text(f"  ✗ {r.code}: {r.message}", style="red")


def fix_and_warnings(report: Report) -> Iterator[object]:
    """The fix (each change, then the corrected lines, pasteable), the flags ignored, the warnings."""
    if report.exit_code != EXIT_OK:
        yield Text("Fix", style="bold")
        if report.fix is None:
            yield Text("  no change of flags found that makes this pairing work")
        else:
            for c in report.fix.changes:
                yield Text(f"  {c.describe()}")
            changed = report.fix.changed
            yield Text(f"  corrected command line{'s' if len(changed) > 1 else ''} "
                       f"(verified: {report.fix.after.outcome}):")
            for side in changed:
                yield Text(f"  # {side}", style="dim")
                for part in quote_lines(report.fix.line(side), 76):
                    yield Text(f"  {part}", no_wrap=True, overflow="ignore")   # pasteable: never re-wrapped
    for name, e in sides(report):
        if e.line.ignored:
            yield Text(f"{name}: ignored (no effect on the transfer): {', '.join(e.line.ignored)}", style="dim")
    for w in report.warnings:
        yield Text(f"warning: {w}", style="yellow")


def junit_suite(report: Report, label: str, skipped: bool) -> tuple[ET.Element, ET.Element]:
    """The document and its suite, with its first case: whether ``label`` accepts the pairing."""
    a: Any = report.assessment
    root = ET.Element("testsuites", name="mambaxfer preflight")
    suite = ET.SubElement(root, "testsuite", name="mambaxfer preflight", tests="2",
                          failures=str(int(a.refused) + int(a.corrupt or a.fails)), errors="0",
                          skipped=str(int(skipped)))
    case = ET.SubElement(suite, "testcase", classname="mambaxfer.preflight", name=f"{label} accepts the pairing")
    if a.refused:
        failure = ET.SubElement(case, "failure", message=f"{a.refusals[0].code}: {a.refusals[0].message}",
                                type="mambaxfer.preflight")
        failure.text = "\n".join([f"{r.code}: {r.message}" for r in a.refusals] + report.fix_commands())
    return root, suite


def junit_text(root: ET.Element) -> str:
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
