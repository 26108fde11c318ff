"""``mambaxfer preflight``: will two ``vllm serve`` engines work together as P and D?"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

from mambaxfer_cli.cli.options import (
    ServingEngineOpt,
    DVllmVersionOpt, EngineOption, Format, GdnBackendOpt, GpuOpt, OutputOption, PVllmVersionOpt, VllmVersionOpt,
    check_writable, engines,
)
from mambaxfer_cli.errors import UserError


def _text(line: str | None, file: Path | None, side: str) -> str:
    if line is not None and file is None:
        return line
    if file is None or line is not None:
        raise UserError(f"give --{side} 'vllm serve ...' or --{side}-file FILE (one of them)")
    from mambaxfer_cli.limits import MAX_SCRIPT_BYTES
    from mambaxfer_cli.readers.documents import read_text

    return read_text(Path(file), f"--{side}-file {file}", MAX_SCRIPT_BYTES, "the script that starts the engine")


def preflight(
    prefill: Annotated[Optional[str], EngineOption(
        "--prefill", help="The prefill engine's command line: 'vllm serve MODEL ...'.", show_default=False)] = None,
    decode: Annotated[Optional[str], EngineOption(
        "--decode", help="The decode engine's command line: 'vllm serve MODEL ...'.", show_default=False)] = None,
    prefill_file: Annotated[Optional[Path], EngineOption(
        "--prefill-file", help="A file with P's command line, or a shell script that runs it.",
        show_default=False)] = None,
    decode_file: Annotated[Optional[Path], EngineOption(
        "--decode-file", help="A file with D's command line, or a shell script that runs it.",
        show_default=False)] = None,
    fmt: Annotated[Format, OutputOption(
        "--format", "-f", help="table, json or yaml (mambaxfer.preflight/v1).")] = Format.table,
    junit: Annotated[Optional[Path], OutputOption(
        "--junit", help="Also write the verdict as JUnit XML to FILE.", show_default=False)] = None,
    serving_engine: ServingEngineOpt = "vllm",
    vllm_version: VllmVersionOpt = None,
    p_vllm_version: PVllmVersionOpt = None,
    d_vllm_version: DVllmVersionOpt = None,
    gpu: GpuOpt = None,
    gdn_prefill_backend: GdnBackendOpt = None,
) -> None:
    """Check a P/D deployment from its two vllm serve command lines: the vLLM release's verdict, a
    byte-level check of its reads, and the corrected command lines when anything fails.

    Exit code 0: the deployment works and moves the right bytes; 1: vLLM would refuse it, its
    transfers fail, or it corrupts state (explained); 2: a usage error; 70: an internal error.

    [bold]Examples[/]

    mambaxfer preflight --prefill 'vllm serve Qwen/Qwen3.5-0.8B -tp 1' --decode 'vllm serve Qwen/Qwen3.5-0.8B -tp 4'

    mambaxfer preflight --prefill-file prefill.sh --decode-file decode.sh --junit preflight.xml
    """
    from mambaxfer_cli.preflight import preflight as run
    from mambaxfer_cli.engines import engine as engine_named
    from mambaxfer_cli.readers.serve_model import load_serve_model

    p_text = _text(prefill, prefill_file, "prefill")
    d_text = _text(decode, decode_file, "decode")
    serving = engine_named(serving_engine)
    p_line = serving.read_serve_line(p_text, "--prefill-file" if prefill is None else "--prefill")
    d_line = serving.read_serve_line(d_text, "--decode-file" if decode is None else "--decode")
    if junit is not None:   # fail before the work, not after it
        check_writable(junit, "--junit")
    deployment = engines(engine=serving_engine,
                         vllm_version=vllm_version, p_vllm_version=p_vllm_version, d_vllm_version=d_vllm_version,
                         gpu=gpu, gdn_prefill_backend=gdn_prefill_backend)
    report = run(p_line, d_line, load_serve_model, deployment)
    from mambaxfer_cli.cli.report import finish
    from mambaxfer_cli.render.preflight_view import junit_xml, render_report

    finish(report.exit_code, report.to_dict(), fmt, lambda: render_report(report), junit, lambda: junit_xml(report))
