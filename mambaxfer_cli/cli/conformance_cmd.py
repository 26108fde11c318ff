"""``mambaxfer conformance``: is mambaxfer right about the vLLM installed beside it?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

from mambaxfer_cli.cli.options import MODEL_HELP, EngineOption, Format, ModelOption, OutputOption, check_writable
from mambaxfer_cli.errors import UserError

# A deployment's TP sizes: conformance compares every pairing up to this, per model.
MAX_CONFORMANCE_TP = 64


def conformance(
    model: Annotated[Optional[str], ModelOption(
        "--model", "-m", help=MODEL_HELP + " Or use --all-presets.", show_default=False)] = None,
    all_presets: Annotated[bool, ModelOption(
        "--all-presets/--no-all-presets", help="Compare on every built-in model.")] = False,
    max_tp: Annotated[int, EngineOption(
        "--max-tp", help="Compare every pairing of the model's valid TP sizes up to N.")] = 8,
    fmt: Annotated[Format, OutputOption(
        "--format", "-f", help="table, json or yaml (mambaxfer.conformance/v1).")] = Format.table,
    junit: Annotated[Optional[Path], OutputOption(
        "--junit", help="Also write one JUnit test case per vLLM function to FILE.", show_default=False)] = None,
) -> None:
    """Run the installed vLLM's own functions on each model and P/D pairing and compare every answer with mambaxfer's.

    Compared: the conv split and SSM offsets, the sources, the descriptor IDs, both engines'
    geometry, the handshake's verdict and the compatibility hash. Each function agrees, differs
    (the first differing case, both values, and the mambaxfer command that shows ours) or could
    not be called (the installed vLLM changed a signature or an attribute it reads). Needs vLLM in
    the same environment.

    Exit code 0: every function agrees; 1: a function differs or could not be called; 2: a usage
    error, or no vLLM installed here; 70: an internal error.

    [bold]Examples[/]

    mambaxfer conformance --all-presets --junit conformance.xml

    mambaxfer conformance --model qwen3.5-0.8b --max-tp 4 --format json
    """
    from mambaxfer_cli.limits import within

    if (model is None) == (not all_presets):
        raise UserError("give --model M or --all-presets (one of them)")
    within("--max-tp", max_tp, 1, MAX_CONFORMANCE_TP, "deployment's TP size")
    if model is not None:
        names = [model]
    else:
        from mambaxfer_cli.readers.model_source import preset_names

        names = preset_names()
    if junit is not None:   # fail before the run, not after it
        check_writable(junit, "--junit")

    from mambaxfer_cli.conformance import run
    from mambaxfer_cli.render.conformance_view import junit_xml, progress, render_report

    with progress() as (start, done):
        report = run(names, max_tp, start, done)
    from mambaxfer_cli.cli.report import finish

    finish(report.exit_code, report.to_dict(), fmt, lambda: render_report(report), junit, lambda: junit_xml(report))
