"""``mambaxfer preflight``: will two ``vllm serve`` engines (or two SGLang servers) work together as P
and D?"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from mambaxfer_cli.cli.options import EngineArgs, OutputArgs, a_document_path
from mambaxfer_cli.cli.params import ENGINES, command, given, option
from mambaxfer_cli.cli.report import finish
from mambaxfer_cli.engines import ServingEngine, engine, names, one
from mambaxfer_cli.errors import UserError, quoted
from mambaxfer_cli.readers.shell import ASSIGN, check_syntax


def _engine(engines: EngineArgs, p_text: str, d_text: str, environ: Mapping[str, str]) -> ServingEngine:
    """--engine where given, else the engine whose server both lines run, else --engine's default."""
    if not given("engine"):
        for name in names():
            if engine(name).unanswered is None and engine(name).runs(p_text, d_text, environ):
                return engine(name)
    return one(engines.engine)


def _text(line: str | None, file: Path | None, side: str) -> str:
    if line is not None and file is None:
        return line
    if file is None or line is not None:
        raise UserError(f"give --{side} 'vllm serve ...' or --{side}-file FILE (one of them)")
    from mambaxfer_cli.limits import MAX_SCRIPT_BYTES
    from mambaxfer_cli.readers.documents import read_text

    return read_text(Path(file), f"--{side}-file {file}", MAX_SCRIPT_BYTES, "the script that starts the engine")


def _environ(pairs: list[str] | None) -> dict[str, str]:
    """The environment the lines start with: this shell's, then --env's."""
    environ = dict(os.environ)
    for pair in pairs or ():
        m = ASSIGN.match(pair)
        if m is None:
            raise UserError(f"--env {quoted(pair)}: give NAME=VALUE (NAME: letters, digits, _)")
        environ[m.group(1)] = m.group(2)
    return environ


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
        "--prefill-file", help="A file with P's command line, or a shell script that runs it ('-': standard "
                              "input).", panel=ENGINES, parser=a_document_path, metavar="<path>"),
    decode_file: Path | None = option(
        "--decode-file", help="A file with D's command line, or a shell script that runs it ('-': standard "
                              "input).", panel=ENGINES, parser=a_document_path, metavar="<path>"),
    env: list[str] | None = option(
        "--env", metavar="NAME=VALUE", help="A variable the lines read ($NAME), as the shell that runs them "
             "has it; wins over this shell's environment. Repeat it. Gives what only running a script tells "
             "(MODEL=$(...), a variable set elsewhere).", panel=ENGINES),
) -> None:
    """Check a P/D deployment from its two server command lines (vLLM's vllm serve, SGLang's
    launch_server): the release's verdict, a byte-level check of its transfers, and the corrected
    command lines when anything fails.

    Two SGLang launch lines (python -m sglang.launch_server, sglang serve) get SGLang 0.5.23's
    verdict the same way; the engine is the lines', or --engine's.

    [bold]Examples[/]

    mambaxfer preflight --prefill 'vllm serve Qwen/Qwen3.5-0.8B -tp 1' --decode 'vllm serve Qwen/Qwen3.5-0.8B -tp 4'

    mambaxfer preflight --prefill-file prefill.sh --decode-file decode.sh --junit preflight.xml

    mambaxfer preflight --prefill-file prefill.sh --decode-file decode.sh --env MODEL=nvidia/Nemotron-H-8B-Base-8K
    """
    if str(prefill_file) == str(decode_file) == "-":
        raise UserError("--prefill-file - and --decode-file -: standard input holds one of them; give the other "
                        "as a file or with --prefill/--decode")
    p_text = _text(prefill, prefill_file, "prefill")
    d_text = _text(decode, decode_file, "decode")
    p_origin = f"--prefill-file {prefill_file}" if prefill is None else "--prefill"
    d_origin = f"--decode-file {decode_file}" if decode is None else "--decode"
    check_syntax(p_text, p_origin)        # what bash cannot read, said alike for every engine
    check_syntax(d_text, d_origin)
    environ = _environ(env)
    finish(_engine(engines, p_text, d_text, environ).preflight(
        engines, output, p_text, d_text, p_origin, d_origin, environ), output)
