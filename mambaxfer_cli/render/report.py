"""The one protocol every command ends with: exit code, document, rendering and JUnit XML."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import EXIT_OK

CHART_EXTRA = "pip install 'mambaxfer[bench]'"      # pyproject's extra that brings matplotlib
CHART_EXTRA_HELP = CHART_EXTRA.replace("[", "\\[")   # the same in --help, past rich's markup


class AsIs:
    """A part of a rendering printed as it is, not fitted to the width (a heading line)."""

    def __init__(self, part: Any) -> None:
        self.part = part


class Report:
    """A command's result: its document (``to_dict``), what the terminal shows (``render``), its
    JUnit XML, and the lines said on stderr (``written``, ``notes``)."""

    def __init__(self, document: dict | None = None, exit_code: int = EXIT_OK) -> None:
        self.document = document if document is not None else {}
        self.exit_code = exit_code

    def to_dict(self) -> dict:
        return self.document

    def render(self, width: int) -> Iterable[Any]:
        raise NotImplementedError(f"{type(self).__name__} has no table view")

    def junit(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} has no JUnit view")

    def written(self, path: Path) -> list[str]:
        return [f"wrote {path}"]

    def notes(self) -> list[str]:
        return []


def check_chart(chart: Path | None) -> None:
    """``--chart``: a PNG, and matplotlib here to draw it; refused before the run, not after it."""
    if chart is None:
        return
    if chart.suffix.lower() != ".png":
        raise UserError(f"--chart {chart}: the chart is a PNG; name it *.png")
    if importlib.util.find_spec("matplotlib") is None:
        raise UserError(f"--chart needs matplotlib, which is not installed: {CHART_EXTRA}")


def chart_notes(draw: Callable[[dict, Any], Any], document: dict, chart: Path | None) -> list[str]:
    """Writes a bench's chart, the figure ``draw(document, pyplot)`` returns, and says so, or why not;
    none when none was asked."""
    if chart is None:
        return []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [f"chart skipped: matplotlib is not installed ({CHART_EXTRA})"]
    figure = draw(document, plt)
    figure.tight_layout()
    figure.savefig(chart)
    plt.close(figure)
    return [f"chart written to {chart}"]


def pairings_junit(title: str, results: Sequence, seconds: float, case: Callable[[Any], tuple]) -> str:
    """``check``'s JUnit XML: a suite per model, a case per pairing; ``case(result)`` gives its class,
    its name, then its failure (message, text), its skip's reason or its output (the others None)."""
    import xml.etree.ElementTree as ET
    from itertools import groupby

    from mambaxfer_cli.render.preflight_view import junit_text

    cases = [(r.model, r.seconds, *case(r)) for r in results]

    def counts(rows: list) -> dict[str, str]:
        return {"tests": str(len(rows)), "failures": str(sum(c[4] is not None for c in rows)),
                "skipped": str(sum(c[5] is not None for c in rows)), "errors": "0"}

    root = ET.Element("testsuites", {"name": title, **counts(cases), "time": f"{seconds:.3f}"})
    for model, group in groupby(cases, key=lambda c: c[0]):
        rows = list(group)
        suite = ET.SubElement(root, "testsuite", {"name": f"{title} {model}", **counts(rows),
                                                  "time": f"{sum(c[1] for c in rows):.3f}"})
        for _, took, classname, name, failure, skipped, out in rows:
            element = ET.SubElement(suite, "testcase", classname=classname, name=name, time=f"{took:.3f}")
            if failure is not None:
                ET.SubElement(element, "failure", message=failure[0], type="mambaxfer.check").text = failure[1]
            elif skipped is not None:
                ET.SubElement(element, "skipped", message=skipped)
            elif out is not None:
                ET.SubElement(element, "system-out").text = out
    return junit_text(root)


class Viewed(Report):
    """A core report (``exit_code``, ``to_dict``) with its view's functions."""

    def __init__(self, report: Any, render: Any, junit: Any = None) -> None:
        super().__init__(exit_code=report.exit_code)
        self.report, self._render, self._junit = report, render, junit

    def to_dict(self) -> dict:
        return self.report.to_dict()

    def render(self, width: int) -> Iterable[Any]:
        return self._render(self.report)

    def junit(self) -> str:
        if self._junit is None:
            return super().junit()
        return self._junit(self.report)
