"""The ``mambaxfer`` command line: thin typer commands that parse, delegate and render.

Exit codes, the same for every command: 0 done (verified); 1 wrong bytes, or a pairing vLLM
refuses (``check``, ``execute``); 2 a usage error; 3 an ``execute`` run that could not complete;
70 an internal error (a bug: the traceback is printed, please report it); 130 interrupted
(Ctrl-C); 129 and 143 stopped by SIGHUP and SIGTERM.
"""

from __future__ import annotations

import os
import re
import signal
import sys
from typing import Annotated, Optional

import typer

from mambaxfer_cli import __version__, exits
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import EXIT_INTERNAL, EXIT_USAGE

app = typer.Typer(
    name="mambaxfer",
    help="Plan, check and execute P/D transfers of Mamba-family state (vLLM NIXL connector).",
    epilog="Exit codes: 0 ok; 1 wrong bytes or a refused pairing; 2 usage error; 3 execute run failed; "
           "70 internal error (a bug, please report it); 130 interrupted.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _flags_without_metavar() -> None:
    """typer's help shows '<bool>' beside a --flag/--no-flag pair, which takes no value."""
    option = typer.core.TyperOption
    shown = option.display_type_rich

    def display_type_rich(self, ctx):
        return None if self.is_flag else shown(self, ctx)

    option.display_type_rich = display_type_rich


_flags_without_metavar()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mambaxfer {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[Optional[bool], typer.Option(
        "--version", "-V", help="Print mambaxfer's version and exit.", callback=_version,
        is_eager=True)] = None,
) -> None:
    """Plan, check and execute P/D transfers of Mamba-family state (vLLM NIXL connector)."""


def red_line(message: str) -> None:
    """One red line on stderr."""
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}")


def fail(message: str) -> "typer.Exit":
    """Print one red line on stderr; the caller raises the returned Exit (code 2)."""
    red_line(message)
    return typer.Exit(EXIT_USAGE)


_verdict: list[int] = []


def verdict(code: int) -> None:
    """The command's outcome is known: the exit code to keep if its output pipe closes early."""
    _verdict[:] = [code]


def _one_line(text: str) -> str:
    """One line, with any very long word (a value pasted by mistake) cut to its ends."""
    text = "; ".join(line.strip() for line in text.splitlines() if line.strip())
    return re.sub(r"\S{81,}", lambda m: f"{m.group()[:40]}...({len(m.group())} characters)", text)


def _usage_error(exc) -> int:
    """Option parsing's error as one red line (typer's box is many), with a pointer to --help."""
    from mambaxfer_cli._click_compat import click

    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.exceptions.NoArgsIsHelpError) and ctx is not None:
        typer.echo(ctx.get_help())
        return exc.exit_code
    message = _one_line(exc.format_message())
    if isinstance(exc, click.exceptions.UsageError) and ctx is not None:
        message += f" (see '{ctx.command_path} --help')"
    red_line(message)
    return exc.exit_code


def _silence_stdout() -> None:
    """After a closed pipe, the interpreter's last flush must not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _closed_pipe() -> int:
    """A reader that stopped reading (``| head``) is not a failure: the command's own verdict, when
    it is known, else 141 as for SIGPIPE."""
    _silence_stdout()
    return _verdict[0] if _verdict else 128 + signal.SIGPIPE


def run(args: list[str], prog_name: str = "mambaxfer") -> int:
    """Run one command line; returns the exit code. Every way out is decided here."""
    _verdict.clear()
    try:
        from mambaxfer_cli._click_compat import click

        command = typer.main.get_command(app)
        command._main_shell_completion(ctx_args={}, prog_name=prog_name)
        with command.make_context(prog_name, list(args)) as ctx:
            command.invoke(ctx)
        return 0
    except KeyboardInterrupt as exc:     # a stop signal (exits.Stopped), or Python's own Ctrl-C
        return exits.report(exc)
    except typer.Exit as exc:
        return exc.exit_code
    except UserError as exc:
        red_line(str(exc))
        return EXIT_USAGE
    except click.exceptions.ClickException as exc:
        return _usage_error(exc)
    except typer.Abort:
        return exits.report(KeyboardInterrupt())
    except BrokenPipeError:
        return _closed_pipe()
    except SystemExit as exc:
        if isinstance(exc.__context__, BrokenPipeError):   # rich's own reaction to a closed pipe
            return _closed_pipe()
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    except BaseException:
        import traceback

        traceback.print_exc()
        red_line(f"internal error (a bug in mambaxfer {__version__}, please report it with the command "
                 f"line and the traceback above); exit code {EXIT_INTERNAL}")
        return EXIT_INTERNAL


def flushed(code: int) -> int:
    """The exit code once stdout is flushed (a reader that stopped reading decides it then)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return _closed_pipe()
    return code


# Each module registers its command on ``app``.
from mambaxfer_cli.cli import models_cmd, inspect_cmd, plan_cmd, schema_cmd  # noqa: E402,F401
from mambaxfer_cli.cli import check_cmd, execute_cmd, bench_cmd  # noqa: E402,F401
from mambaxfer_cli.cli import preflight_cmd  # noqa: E402,F401
