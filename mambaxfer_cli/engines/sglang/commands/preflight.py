"""``preflight`` of two SGLang servers: their lines, as SGLang's parser reads them."""

from __future__ import annotations

from typing import Mapping

from mambaxfer_cli.cli.options import EngineArgs, OutputArgs, check_writable
from mambaxfer_cli.engines.sglang.launch_args import launches, parse_launch
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.render.report import Viewed


def runs(p_text: str, d_text: str, environ: Mapping[str, str]) -> bool:
    """Whether both lines run SGLang's server; one of them only: one line."""
    found = [launches(p_text, environ), launches(d_text, environ)]
    if found[0] != found[1]:
        which = "P" if found[0] else "D"
        raise UserError(f"{which}'s line runs SGLang's server and the other does not: preflight pairs two servers "
                        f"of one engine")
    return found[0]


def preflight(engines: EngineArgs, output: OutputArgs, p_text: str, d_text: str, p_origin: str,
              d_origin: str, environ: Mapping[str, str]) -> Viewed:
    from mambaxfer_cli.cli.params import changed_flags
    from mambaxfer_cli.engines.sglang.preflight import preflight as run
    from functools import partial

    from mambaxfer_cli.engines.sglang.release import SGLANG_0_5_23
    from mambaxfer_cli.engines.sglang.served import startup
    from mambaxfer_cli.readers.model_source import load_model
    from mambaxfer_cli.engines.sglang.views.preflight import junit_xml, render_report

    given = changed_flags(engines, skip=("engine",), said=True)
    if given:
        raise UserError(f"{', '.join(given)}: vLLM's option{'s' if len(given) > 1 else ''}; SGLang's lines say "
                        f"what their servers run (--engine sglang)")
    p_line = parse_launch(p_text, p_origin, environ)
    d_line = parse_launch(d_text, d_origin, environ)
    if output.junit is not None:   # fail before the work, not after it
        check_writable(output.junit, "--junit")
    report = run(p_line, d_line, partial(load_model, startup=startup(SGLANG_0_5_23.version)))
    return Viewed(report, render_report, junit_xml)
