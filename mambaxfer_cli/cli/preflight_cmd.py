"""``mambaxfer preflight``: will two ``vllm serve`` engines (or two SGLang servers) work together as P
and D?"""

from __future__ import annotations

from pathlib import Path

from mambaxfer_cli.cli.options import EngineArgs, OutputArgs, check_writable
from mambaxfer_cli.cli.params import ENGINES, command, given, option
from mambaxfer_cli.cli.report import Viewed, finish
from mambaxfer_cli.errors import UserError

SGLANG = "sglang"


def _engine(engines: EngineArgs, p_text: str, d_text: str) -> str:
    """--engine where given, else the engine the lines run: SGLang's launcher, else vLLM's."""
    if given("engine"):
        return engines.engine
    from mambaxfer_cli.engines.sglang.launch_args import launches

    runs = [launches(p_text), launches(d_text)]
    if runs[0] != runs[1]:
        which = "P" if runs[0] else "D"
        raise UserError(f"{which}'s line runs SGLang's server and the other does not: preflight pairs two servers "
                        f"of one engine")
    return SGLANG if runs[0] else engines.engine


def _sglang(engines: EngineArgs, output: OutputArgs, p_text: str, d_text: str, p_origin: str,
            d_origin: str) -> None:
    """preflight of two SGLang servers (their lines, as SGLang's parser reads them)."""
    from mambaxfer_cli.cli.params import changed_flags
    from mambaxfer_cli.engines.sglang.launch_args import parse_launch
    from mambaxfer_cli.preflight.sglang import preflight as run
    from mambaxfer_cli.readers.serve_model import load_serve_model
    from mambaxfer_cli.render.sglang_preflight_view import junit_xml, render_report

    given = changed_flags(engines, skip=("engine",))
    if given:
        raise UserError(f"{', '.join(given)}: vLLM's option{'s' if len(given) > 1 else ''}; SGLang's lines say "
                        f"what their servers run (--engine sglang)")
    p_line = parse_launch(p_text, p_origin)
    d_line = parse_launch(d_text, d_origin)
    if output.junit is not None:   # fail before the work, not after it
        check_writable(output.junit, "--junit")
    report = run(p_line, d_line, load_serve_model)
    finish(Viewed(report, render_report, junit_xml), output)


def _text(line: str | None, file: Path | None, side: str) -> str:
    if line is not None and file is None:
        return line
    if file is None or line is not None:
        raise UserError(f"give --{side} 'vllm serve ...' or --{side}-file FILE (one of them)")
    from mambaxfer_cli.limits import MAX_SCRIPT_BYTES
    from mambaxfer_cli.readers.documents import read_text

    return read_text(Path(file), f"--{side}-file {file}", MAX_SCRIPT_BYTES, "the script that starts the engine")


@command(uses={"engines": EngineArgs.given("engine", "vllm_version", "p_vllm_version", "d_vllm_version", "gpu",
                                           "gdn_prefill_backend"),
               "output": OutputArgs.without("output")})
def preflight(
    engines: EngineArgs,
    output: OutputArgs,
    prefill: str | None = option(
        "--prefill", help="The prefill engine's command line: 'vllm serve MODEL ...' or "
             "'python -m sglang.launch_server ...'.", panel=ENGINES),
    decode: str | None = option(
        "--decode", help="The decode engine's command line, like --prefill.", panel=ENGINES),
    prefill_file: Path | None = option(
        "--prefill-file", help="A file with P's command line, or a shell script that runs it.", panel=ENGINES),
    decode_file: Path | None = option(
        "--decode-file", help="A file with D's command line, or a shell script that runs it.", panel=ENGINES),
) -> None:
    """Check a P/D deployment from its two vllm serve command lines: the vLLM release's verdict, a
    byte-level check of its reads, and the corrected command lines when anything fails.

    Two SGLang launch lines (python -m sglang.launch_server, sglang serve) get SGLang 0.5.23's
    verdict the same way; the engine is the lines', or --engine's.

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
    if _engine(engines, p_text, d_text) == SGLANG:
        return _sglang(engines, output, p_text, d_text, "--prefill-file" if prefill is None else "--prefill",
                       "--decode-file" if decode is None else "--decode")
    serving = engine_named(engines.engine)
    p_line = serving.read_serve_line(p_text, "--prefill-file" if prefill is None else "--prefill")
    d_line = serving.read_serve_line(d_text, "--decode-file" if decode is None else "--decode")
    if output.junit is not None:   # fail before the work, not after it
        check_writable(output.junit, "--junit")
    report = run(p_line, d_line, load_serve_model, engines.build())
    from mambaxfer_cli.render.preflight_view import junit_xml, render_report

    finish(Viewed(report, render_report, junit_xml), output)
