"""The ``mambaxfer`` command line: a typer app of thin commands that parse, delegate and render,
with the same exit codes for every command (``exits``)."""

from __future__ import annotations

import importlib
import os
import re
import sys
from typing import Annotated, Sequence

import typer

from mambaxfer_cli import __version__, exits
from mambaxfer_cli.cli.outcome import closed_pipe, forget, red_line
from mambaxfer_cli.cli.params import for_line
from mambaxfer_cli.errors import Refused, UserError
from mambaxfer_cli.exits import (EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE,
                                  EXIT_WRONG)

PROG = "mambaxfer"
COMPLETE_VAR = "_MAMBAXFER_COMPLETE"     # typer's name for it: _{PROG}_COMPLETE

COMMON_EXITS = (f"{EXIT_USAGE} a usage error (one red line); {EXIT_INTERNAL} an internal error (a bug: please "
                f"report it); {EXIT_INTERRUPTED} interrupted (Ctrl-C)")
VERDICT = (f"{EXIT_OK} the pairing works, every byte verified; {EXIT_WRONG} the engine would not run it (it refuses "
           f"the model, a TP size or the pairing) or moves wrong bytes")
RUN = (f"{EXIT_OK} every byte verified; {EXIT_WRONG} wrong bytes, or the engine does not start it; "
       f"{EXIT_RUN_FAILED} the run could not complete (a rank died, a peer did not answer)")

# Every command, registered here alone, in the order `mambaxfer --help` lists them: its function
# ("module:function", imported when the command runs), its summary in that list (its docstring's
# first paragraph) and what its own exit codes mean (its --help ends with them, before the ones
# every command shares). A command's module imports only light things at its top.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "plan": ("mambaxfer_cli.cli.plan_cmd:plan",
             "Plan a P/D transfer: whether the engine (vLLM, or SGLang) accepts it, both sides and the reads; with "
             "--show, both sides' layouts, every segment, page diagrams and descriptor IDs.",
             f"{EXIT_OK} the plan was printed, also when it says vLLM refuses the pairing at handshake or moves "
             f"wrong bytes (plan inspects; check and preflight give a verdict); {EXIT_WRONG} the engine does not "
             f"start the model, a TP size or the --speculative-config given (its words)"),
    "check": ("mambaxfer_cli.cli.check_cmd:check",
              "Will these P/D pairings work? Each pairing's transfer is simulated on real bytes and every byte and "
              "descriptor ID verified: mambaxfer's exact plan, and the reads vLLM issues or the writes SGLang posts.",
              VERDICT + ", or mambaxfer's exact plan is wrong (one line each, with the fix)"),
    "preflight": ("mambaxfer_cli.cli.preflight_cmd:preflight",
                  "Check a P/D deployment from its two server command lines (vLLM's vllm serve, SGLang's "
                  "launch_server): the release's verdict, a byte-level check of its transfers, and the corrected "
                  "command lines when anything fails.",
                  VERDICT + " (the corrected command lines are printed)"),
    "inspect": ("mambaxfer_cli.cli.inspect_cmd:inspect",
                "Show each rank's sub-projection dims, shards, byte offsets and sizes for the given TP sizes, and what "
                "the engine derives for each TP size: vLLM's block geometry on the GPU, SGLang's state shapes per "
                "slot.",
                f"{EXIT_OK} printed; {EXIT_WRONG} the engine does not start the model, a TP size or the "
                f"--speculative-config given (its words)"),
    "models": ("mambaxfer_cli.cli.models_cmd:models",
               "List the built-in model presets with their variant, layer counts, dtypes and source.",
               f"{EXIT_OK} listed"),
    "execute": ("mambaxfer_cli.cli.execute_cmd:execute",
                "Run P and D ranks as processes with real NIXL agents, move the state as the engine does (vLLM's "
                "READs, SGLang's WRITEs), verify every byte.",
                RUN),
    "bench": ("mambaxfer_cli.cli.bench_cmd:bench",
              "Measure the plan's transfer between real NIXL agents, as planned, coalesced, and as one descriptor per "
              "source (the machine's limit), pulled (D READs) and pushed (P WRITEs); every byte verified.",
              RUN),
    "conformance": ("mambaxfer_cli.cli.conformance_cmd:conformance",
                    "Run the installed engine's own functions (vLLM's or SGLang's) on each model and P/D pairing and "
                    "compare every answer with mambaxfer's.",
                    f"{EXIT_OK} every function agrees; {EXIT_WRONG} a function differs or could not be called (no vLLM "
                    f"installed here, with --engine sglang no SGLang, is a usage error)"),
    "schema": ("mambaxfer_cli.cli.schema_cmd:schema",
               "Print the JSON Schema (draft 2020-12) of a document mambaxfer emits (mambaxfer.NAME/v1).",
               f"{EXIT_OK} printed"),
}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"{PROG} {__version__}")
        raise typer.Exit(EXIT_OK)


VERSION = typer.Option("--version", "-V", help="Print mambaxfer's version and exit.", callback=_version, is_eager=True)


def _options(ctx: typer.Context, version: Annotated[bool, VERSION] = False) -> None:
    if ctx.invoked_subcommand is None:    # `mambaxfer` alone: its help, and exit 2 (no command given)
        shown = ctx.get_help()            # rich prints it; a plain formatter returns it
        if shown:
            typer.echo(shown)
        raise typer.Exit(EXIT_USAGE)


def build(args: Sequence[str] | None = None) -> typer.Typer:
    """The typer app for one command line (``None``: every command whole): a line that names a
    command imports and builds that one alone (``for_line``), any other gets the list of commands."""
    app = typer.Typer(
        name=PROG,
        help="Plan, check and execute P/D transfers of Mamba-family state (vLLM's NIXL connector and SGLang's "
             "disaggregation).",
        epilog="Exit codes: 0 ok; 1 the engine would not run it (refused) or wrong bytes; 2 usage error; 3 execute "
               "run failed; 70 internal error (a bug, please report it); 130 interrupted.",
        context_settings={"help_option_names": ["-h", "--help"]},
        rich_markup_mode="rich",
    )
    app.callback(invoke_without_command=True)(_options)
    named = None if args is None else next((arg for arg in args if not arg.startswith("-")), "")
    for name, (target, summary, own_exits) in COMMANDS.items():
        if named in COMMANDS and name != named:
            continue
        if named is None or name == named:
            module, _, function = target.partition(":")
            command = getattr(importlib.import_module(module), function)
            app.command(name, epilog=f"Exit codes: {own_exits}; {COMMON_EXITS}.")(for_line(command, args))
        else:
            app.command(name, help=summary)(_listed)
    return app


def _listed() -> None:
    """A command as the list shows it; never run: a line that names a command builds it whole."""
    raise AssertionError("a command runs as itself")


def __getattr__(name: str) -> typer.Typer:
    """``app``: every command on one typer app, as the docs and tests see it."""
    if name == "app":
        return build()
    raise AttributeError(name)


def _usage_error(exc: typer.TyperException) -> int:
    """Option parsing's error as one red line (a box would be many), any very long word (a value
    pasted by mistake) cut to its ends, with a pointer to --help."""
    message = "; ".join(line.strip() for line in exc.format_message().splitlines() if line.strip())
    message = re.sub(r"\S{81,}", lambda m: f"{m.group()[:40]}...({len(m.group())} characters)", message)
    # typer's choices say what pydantic's validator said, behind its "Value error, "
    message = message.replace(": Value error, ", ": ")
    ctx = getattr(exc, "ctx", None)      # a usage error's: the command it was made for
    if ctx is not None:
        message += f" (see '{ctx.command_path} --help')"
    red_line(message)
    return exc.exit_code


def run(args: list[str], prog_name: str = PROG) -> int:
    """Run one command line; returns the exit code. Every way out is decided here."""
    forget()
    try:
        instruction = os.environ.get(COMPLETE_VAR)
        command = typer.main.get_command(build(None if instruction else args))
        if instruction:
            from typer.completion import shell_complete

            return shell_complete(command, {}, prog_name, COMPLETE_VAR, instruction)
        with command.make_context(prog_name, list(args)) as ctx:
            command.invoke(ctx)
        return 0
    except KeyboardInterrupt as exc:     # a stop signal (exits.Stopped), or Python's own Ctrl-C
        return exits.report(exc)
    except typer.Exit as exc:
        return exc.exit_code
    except UserError as exc:
        red_line(str(exc))
        return EXIT_WRONG if isinstance(exc, Refused) else EXIT_USAGE
    except typer.TyperException as exc:  # typer's usage errors (its click's exceptions are these)
        return _usage_error(exc)
    except typer.Abort:
        return exits.report(KeyboardInterrupt())
    except BrokenPipeError:
        return closed_pipe()
    except SystemExit as exc:
        if isinstance(exc.__context__, BrokenPipeError):   # rich's own reaction to a closed pipe
            return closed_pipe()
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
    except BaseException as exc:
        stop = _wrapped_stop(exc)
        if stop is not None:        # a stop signal Python re-raised as another error
            return exits.report(stop)
        import traceback

        traceback.print_exc()
        red_line(f"internal error (a bug in mambaxfer {__version__}, please report it with the command "
                 f"line and the traceback above); exit code {EXIT_INTERNAL}")
        return EXIT_INTERNAL


def _wrapped_stop(exc: BaseException) -> KeyboardInterrupt | None:
    """The stop signal behind ``exc`` where Python wrapped it (Python 3.11's ``__set_name__``
    RuntimeError, when a signal lands while a class is created)."""
    seen: set[int] = set()
    cause = exc.__cause__
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__
    return None


def flushed(code: int) -> int:
    """The exit code once stdout is flushed (a reader that stopped reading decides it then)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        return closed_pipe()
    return code
