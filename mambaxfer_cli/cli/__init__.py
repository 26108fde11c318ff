"""The ``mambaxfer`` command line: thin click commands that parse, delegate and render.

Exit codes, the same for every command: 0 done (verified); 1 wrong bytes, or a pairing vLLM
refuses (``check``, ``execute``); 2 a usage error; 3 an ``execute`` run that could not complete;
70 an internal error (a bug: the traceback is printed, please report it); 130 interrupted
(Ctrl-C); 129 and 143 stopped by SIGHUP and SIGTERM.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from dataclasses import dataclass

import click

from mambaxfer_cli import __version__, exits
from mambaxfer_cli.cli.outcome import closed_pipe, forget, red_line
from mambaxfer_cli.cli.params import Option, command
from mambaxfer_cli.errors import UserError
from mambaxfer_cli.exits import (EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE,
                                  EXIT_WRONG)

PROG = "mambaxfer"
COMPLETE_VAR = "_MAMBAXFER_COMPLETE"


@dataclass(frozen=True)
class Command:
    """A command: its name, the function that runs it (``module:function``, imported only when
    the command runs; built by ``params.command``) and its summary in the command list (its
    docstring's first paragraph)."""

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
        found = getattr(importlib.import_module(module), function)
        built = found if isinstance(found, click.Command) else command()(found)
        built.epilog = self.epilog
        return built


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


class Commands(click.Group):
    """The command group: a command's module is imported when that command runs; listing the
    commands (``--help``, a mistyped name, completion) imports none."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = COMMANDS.get(cmd_name)
        return None if command is None else command.load()

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from mambaxfer_cli.render.help import show_help

        show_help(self, ctx, commands=[(c.name, c.summary) for c in COMMANDS.values()])

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list:
        """The commands named from the registry, then the group's own options."""
        from click.shell_completion import CompletionItem

        found = [CompletionItem(c.name, help=c.summary) for c in COMMANDS.values() if c.name.startswith(incomplete)]
        return found + click.Command.shell_complete(self, ctx, incomplete)


def _version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"{PROG} {__version__}")
        ctx.exit(EXIT_OK)


def _shell() -> str:
    """The shell this command runs in: its parent processes' (shellingham), else $SHELL's name."""
    try:
        import shellingham  # type: ignore[import-untyped]  # no type information

        return shellingham.detect_shell()[0]
    except (ImportError, RuntimeError):
        return os.path.basename(os.environ.get("SHELL", "")) or "bash"


def _completion_script(ctx: click.Context) -> tuple[str, str]:
    from click.shell_completion import get_completion_class

    shell = _shell()
    found = get_completion_class(shell)
    if found is None:
        raise UserError(f"shell completion: {shell} is not supported (bash, zsh or fish)")
    root = ctx.find_root().command
    return shell, found(root, {}, PROG, COMPLETE_VAR).source()


def _show_completion(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(_completion_script(ctx)[1], nl=False)
        ctx.exit(EXIT_OK)


# Where each shell reads a completion script from, and the line its start-up file needs (or None).
_INSTALLED = {"bash": ("~/.bash_completions/mambaxfer.sh", "~/.bashrc"),
              "zsh": ("~/.zfunc/_mambaxfer", "~/.zshrc"),
              "fish": ("~/.config/fish/completions/mambaxfer.fish", None)}


def _install_completion(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from pathlib import Path

    shell, script = _completion_script(ctx)
    target, startup = (Path(os.path.expanduser(p)) if p else None for p in _INSTALLED[shell])
    assert target is not None
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(script)
    if startup is not None:
        line = f"source '{target}'" if shell == "bash" else "fpath+=~/.zfunc; autoload -Uz compinit; compinit"
        existing = startup.read_text() if startup.exists() else ""
        if line not in existing:
            startup.write_text(existing + ("" if existing.endswith("\n") or not existing else "\n") + line + "\n")
    click.echo(f"{shell} completion installed in {target}")
    click.echo("Completion will take effect once you restart the terminal")
    ctx.exit(EXIT_OK)


def _flag(names: list[str], help: str, callback) -> Option:
    return Option(names, is_flag=True, expose_value=False, is_eager=True, callback=callback, help=help)


app = Commands(
    name=PROG,
    help="Plan, check and execute P/D transfers of Mamba-family state (vLLM NIXL connector).",
    epilog="Exit codes: 0 ok; 1 wrong bytes or a refused pairing; 2 usage error; 3 execute run failed; "
           "70 internal error (a bug, please report it); 130 interrupted.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    params=[
        _flag(["--version", "-V"], "Print mambaxfer's version and exit.", _version),
        _flag(["--install-completion"], "Install completion for the current shell.", _install_completion),
        _flag(["--show-completion"], "Show completion for the current shell, to copy it or customize the "
                                     "installation.", _show_completion),
    ],
)


def _one_line(text: str) -> str:
    """One line, with any very long word (a value pasted by mistake) cut to its ends."""
    text = "; ".join(line.strip() for line in text.splitlines() if line.strip())
    return re.sub(r"\S{81,}", lambda m: f"{m.group()[:40]}...({len(m.group())} characters)", text)


def _usage_error(exc) -> int:
    """Option parsing's error as one red line (a box would be many), with a pointer to --help."""
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.exceptions.NoArgsIsHelpError):
        # Building the error rendered the help: rich prints it then, a plain formatter returns it.
        if exc.format_message().strip():
            click.echo(exc.format_message())
        return exc.exit_code
    if isinstance(exc, click.exceptions.NoSuchOption):   # one wording whatever click's release
        near = sorted(exc.possibilities or ())
        message = _one_line(f"No such option: {exc.option_name}"
                            + (f" (Possible options: {', '.join(near)})" if near else ""))
    else:
        message = _one_line(exc.format_message())
    if isinstance(exc, click.exceptions.UsageError) and ctx is not None:
        message += f" (see '{ctx.command_path} --help')"
    red_line(message)
    return exc.exit_code


def run(args: list[str], prog_name: str = PROG) -> int:
    """Run one command line; returns the exit code. Every way out is decided here."""
    forget()
    try:
        instruction = os.environ.get(COMPLETE_VAR)
        if instruction:
            from click.shell_completion import shell_complete

            return shell_complete(app, {}, prog_name, COMPLETE_VAR, instruction)
        with app.make_context(prog_name, list(args)) as ctx:
            app.invoke(ctx)
        return 0
    except KeyboardInterrupt as exc:     # a stop signal (exits.Stopped), or Python's own Ctrl-C
        return exits.report(exc)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except UserError as exc:
        red_line(str(exc))
        return EXIT_USAGE
    except click.exceptions.ClickException as exc:
        return _usage_error(exc)
    except click.exceptions.Abort:
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
    """The stop signal behind ``exc``, where Python wrapped it: a signal that lands while a class
    is created comes out of ``__set_name__`` as ``RuntimeError('Error calling __set_name__ ...')``
    (Python 3.11), its cause the ``exits.Stopped``."""
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
