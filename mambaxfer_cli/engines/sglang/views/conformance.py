"""How an SGLang conformance run looks (``conformance --engine sglang``: its words for the shared
view, each difference where long values part), and its progress on stderr."""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from functools import partial
from typing import Any, Callable, Iterator

from mambaxfer_cli.engines.sglang.conformance import IMPORT_STEP, STEPS, FunctionResult, Report, describe, plain
from mambaxfer_cli.render import conformance_view
from mambaxfer_cli.render.conformance_view import Looks, Shown, as_text
from mambaxfer_cli.render.run_view import bar

WHOLE = 200         # characters a value is shown whole up to; a longer one from where the two part
LONGEST = 600       # characters of one value shown at most (--format json has it whole)


def where_they_part(theirs: Any, ours: Any) -> tuple[str, Any, Any]:
    """Two values as a panel shows them: whole when short; else, into lists while they are long,
    the index path of the first element that differs (``[3][0]``) and both elements there."""
    path = ""
    while isinstance(theirs, list) and isinstance(ours, list) and max(len(as_text(theirs)), len(as_text(ours))) > WHOLE:
        common = min(len(theirs), len(ours))
        index = next((i for i in range(common) if theirs[i] != ours[i]), common)
        if index == common:        # one goes on where the other ends
            return f"{path}[{index}:]", theirs[index:], ours[index:]
        path += f"[{index}]"
        theirs, ours = theirs[index], ours[index]
    return path, theirs, ours


def _clipped(value: Any) -> str:
    text = as_text(value)
    return text if len(text) <= LONGEST else f"{text[:LONGEST]} … ({len(text):,} characters)"


def shown(result: FunctionResult, whole: bool = False) -> Shown:
    """The first difference: both values whole, or where they part, each clipped."""
    first = result.first
    assert first is not None, "a function that differs has a first difference"
    theirs, ours = plain(first["sglang"]), plain(first["mambaxfer"])
    if whole:
        return Shown(describe(first["case"]), as_text(theirs), as_text(ours))
    path, theirs, ours = where_they_part(theirs, ours)
    note = f"the values first part at {path} (--format json has them whole):" if path else ""
    return Shown(describe(first["case"]), _clipped(theirs), _clipped(ours), note)


def looks(report: Report) -> Looks:
    return Looks("SGLang", f"mambaxfer conformance: SGLang {report.version} against mambaxfer's rules for "
                           f"{report.rules}",
                 "mambaxfer's call of this SGLang function needs updating (please report it with the SGLang version)",
                 shown, partial(shown, whole=True))


def render_report(report: Report) -> list:
    return conformance_view.render_report(report, looks(report))


def junit_xml(report: Report) -> str:
    return conformance_view.junit_xml(report, looks(report))


@contextmanager
def progress() -> Iterator[tuple[Callable[[int], None], Callable[[str], None]]]:
    """Progress on stderr: a rich bar on a terminal, else a line per step as it ends."""
    started, order = time.monotonic(), (IMPORT_STEP, *STEPS)
    with bar("{task.description}", "importing SGLang") as update:
        def start(total: int) -> None:
            if update is not None:
                update(total=total)
            else:
                sys.stderr.write(f"conformance: {IMPORT_STEP}, then {total - 1} steps of comparison\n")

        def done(step: str) -> None:
            if update is None:
                sys.stderr.write(f"conformance: {step} done ({time.monotonic() - started:.1f} s)\n")
                return
            following = order.index(step) + 1 if step in order else len(order)
            update(advance=1, description=f"comparing {order[following]}" if following < len(order) else "done")

        yield start, done
