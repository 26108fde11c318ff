"""The ``mambaxfer`` command line: thin typer commands that parse, delegate and render.

Exit codes, the same for every command: 0 done (verified); 1 wrong bytes, or a pairing vLLM
refuses (``check``, ``execute``); 2 a usage error; 3 an ``execute`` run that could not complete;
70 an internal error (a bug: the traceback is printed, please report it); 130 interrupted
(Ctrl-C); 129 and 143 stopped by SIGHUP and SIGTERM.
"""

from __future__ import annotations

import importlib
import re
import sys
from dataclasses import dataclass
from typing import Annotated, Literal, Optional

import typer

from mambaxfer_cli import __version__, exits
from mambaxfer_cli._click_compat import click
from mambaxfer_cli.cli.outcome import closed_pipe, forget, red_line
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import (EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE,
                                  EXIT_WRONG)

RICH_MARKUP: Literal["rich"] = "rich"


@dataclass(frozen=True)
class Command:
    """A command: its name, the function that runs it (``module:function``, imported only when
    the command runs) and its summary in the command list (its docstring's first paragraph)."""

    name: str
    target: str
    summary: str
    exits: str = ""         # what its own exit codes mean, before the ones every command shares

    @property
    def epilog(self) -> str:
        """The exit codes its --help ends with."""
        return f"Exit codes: {self.exits}; {COMMON_EXITS}."

    def load(self) -> click.Command:
        module, function = self.target.split(":")
        one = typer.Typer(rich_markup_mode=RICH_MARKUP, pretty_exceptions_enable=False, add_completion=False)
        one.command(self.name, epilog=self.epilog)(getattr(importlib.import_module(module), function))
        return typer.main.get_command(one)


COMMON_EXITS = (f"{EXIT_USAGE} a usage error (one red line); {EXIT_INTERNAL} an internal error (a bug: please "
                f"report it); {EXIT_INTERRUPTED} interrupted (Ctrl-C)")
VERDICT = f"{EXIT_OK} the pairing works, every byte verified; {EXIT_WRONG} vLLM refuses a pairing or moves wrong bytes"
RUN = (f"{EXIT_OK} every byte verified; {EXIT_WRONG} wrong bytes; {EXIT_RUN_FAILED} the run could not complete "
       f"(a rank died, a peer did not answer)")

# Every command, registered here alone, in the order `mambaxfer --help` lists them.
COMMANDS = {c.name: c for c in (
    Command("plan", "mambaxfer_cli.cli.plan_cmd:plan",
            "Plan a P/D transfer: whether vLLM accepts it, both engines and the reads; with --show, "
            "both sides' layouts, every segment, page diagrams and descriptor IDs.",
            f"{EXIT_OK} the plan was printed, also when it says vLLM refuses the pairing or moves wrong "
            f"bytes (plan inspects; check and preflight give a verdict)"),
    Command("check", "mambaxfer_cli.cli.check_cmd:check",
            "Will these P/D pairings work? Each pairing's transfer is simulated on real bytes and "
            "every byte and descriptor ID verified: mambaxfer's exact plan, and the reads vLLM "
            "issues.",
            VERDICT),
    Command("preflight", "mambaxfer_cli.cli.preflight_cmd:preflight",
            "Check a P/D deployment from its two vllm serve command lines: the vLLM release's "
            "verdict, a byte-level check of its reads, and the corrected command lines when anything "
            "fails.",
            VERDICT + " (the corrected command lines are printed)"),
    Command("inspect", "mambaxfer_cli.cli.inspect_cmd:inspect",
            "Show each rank's sub-projection dims, shards, byte offsets and sizes for the given TP "
            "sizes, and the block geometry the vLLM release derives for an engine of each TP size on "
            "the GPU.",
            f"{EXIT_OK} printed"),
    Command("models", "mambaxfer_cli.cli.models_cmd:models",
            "List the built-in model presets with their variant, layer counts, dtypes and source.",
            f"{EXIT_OK} listed"),
    Command("execute", "mambaxfer_cli.cli.execute_cmd:execute",
            "Run P and D ranks as processes with real NIXL agents, READ the plan's descriptor IDs, "
            "verify every byte.",
            RUN),
    Command("bench", "mambaxfer_cli.cli.bench_cmd:bench",
            "Measure the plan's transfer between real NIXL agents, as planned, coalesced, and as one "
            "descriptor per source (the machine's limit), pulled (D READs) and pushed (P WRITEs); "
            "every byte verified.",
            RUN),
    Command("conformance", "mambaxfer_cli.cli.conformance_cmd:conformance",
            "Run the installed vLLM's own functions on each model and P/D pairing and compare every "
            "answer with mambaxfer's.",
            f"{EXIT_OK} every function agrees; {EXIT_WRONG} a function differs or could not be called"),
    Command("schema", "mambaxfer_cli.cli.schema_cmd:schema",
            "Print the JSON Schema (draft 2020-12) of a document mambaxfer emits (mambaxfer.NAME/v1).",
            f"{EXIT_OK} printed"),
)}


class Commands(typer.core.TyperGroup):
    """The command group: a command's module is imported when that command runs; listing the
    commands (``--help``, a mistyped name, completion) imports none."""

    _listing = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = COMMANDS.get(cmd_name)
        if command is None:
            return None
        if self._listing:
            return typer.core.TyperCommand(command.name, short_help=command.summary)
        return command.load()

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="mambaxfer",
    cls=Commands,
    help="Plan, check and execute P/D transfers of Mamba-family state (vLLM NIXL connector).",
    epilog="Exit codes: 0 ok; 1 wrong bytes or a refused pairing; 2 usage error; 3 execute run failed; "
           "70 internal error (a bug, please report it); 130 interrupted.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    rich_markup_mode=RICH_MARKUP,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _flags_without_metavar() -> None:
    """typer's help shows '<bool>' beside a --flag/--no-flag pair, which takes no value."""
    option = typer.core.TyperOption
    shown = option.display_type_rich

    def display_type_rich(self, ctx):
        return None if self.is_flag else shown(self, ctx)

    option.display_type_rich = display_type_rich  # type: ignore[method-assign]  # typer's own method, patched


_flags_without_metavar()


def _help_that_never_cuts() -> None:
    """Lay out --help with ``render.help`` when help is shown (rich's help machinery is costly to
    import: a command that shows no help never imports it)."""
    for cls in (typer.core.TyperCommand, typer.core.TyperGroup):
        shown = cls.format_help

        def format_help(self, ctx, formatter, shown=shown):
            from mambaxfer_cli.render.help import install_help

            install_help()
            return shown(self, ctx, formatter)

        cls.format_help = format_help  # type: ignore[method-assign]  # typer's own method, patched


_help_that_never_cuts()


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mambaxfer {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    version: Annotated[Optional[bool], typer.Option(
        "--version", "-V", help="Print mambaxfer's version and exit.", callback=_version,
        is_eager=True)] = None,
) -> None:
    """Plan, check and execute P/D transfers of Mamba-family state (vLLM NIXL connector)."""


def _one_line(text: str) -> str:
    """One line, with any very long word (a value pasted by mistake) cut to its ends."""
    text = "; ".join(line.strip() for line in text.splitlines() if line.strip())
    return re.sub(r"\S{81,}", lambda m: f"{m.group()[:40]}...({len(m.group())} characters)", text)


def _usage_error(exc) -> int:
    """Option parsing's error as one red line (typer's box is many), with a pointer to --help."""
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        # Building the error rendered the help: rich prints it then, a plain formatter returns it.
        if exc.format_message().strip():
            typer.echo(exc.format_message())
        return exc.exit_code
    message = _one_line(exc.format_message())
    if isinstance(exc, click.exceptions.UsageError) and ctx is not None:
        message += f" (see '{ctx.command_path} --help')"
    red_line(message)
    return exc.exit_code


def run(args: list[str], prog_name: str = "mambaxfer") -> int:
    """Run one command line; returns the exit code. Every way out is decided here."""
    forget()
    try:
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
        return closed_pipe()
    except SystemExit as exc:
        if isinstance(exc.__context__, BrokenPipeError):   # rich's own reaction to a closed pipe
            return closed_pipe()
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
        return closed_pipe()
    return code
