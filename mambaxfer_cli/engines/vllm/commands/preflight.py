"""``preflight`` for vLLM: two ``vllm serve`` lines, the release's verdict and a byte-level check of
their reads."""

from __future__ import annotations

from typing import Mapping

from mambaxfer_cli.cli.options import EngineArgs, OutputArgs, check_writable
from mambaxfer_cli.engines.vllm.options import build
from mambaxfer_cli.render.report import Viewed


def preflight(engines: EngineArgs, output: OutputArgs, p_text: str, d_text: str, p_origin: str,
              d_origin: str, environ: Mapping[str, str]) -> Viewed:
    from mambaxfer_cli.engines.vllm.serve_args import parse_serve
    from mambaxfer_cli.engines.vllm.preflight.report import preflight as run
    from mambaxfer_cli.readers.model_source import load_model
    from mambaxfer_cli.engines.vllm.views.preflight import junit_xml, render_report

    p_line = parse_serve(p_text, p_origin, environ)
    d_line = parse_serve(d_text, d_origin, environ)
    if output.junit is not None:   # fail before the work, not after it
        check_writable(output.junit, "--junit")
    report = run(p_line, d_line, load_model, build(engines))
    return Viewed(report, render_report, junit_xml)
