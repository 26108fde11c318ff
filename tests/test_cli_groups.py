"""Options declared once, in groups: every command's function takes its groups and a few options of
its own; each flag has one declaration in cli/; a group's options come back as its typed value."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cli_run import commands
from mambaxfer_cli.cli import COMMANDS, app
from mambaxfer_cli.cli.options import EngineArgs, ModelArgs, RequestArgs
from mambaxfer_cli.cli.params import ENGINES, Group, command, for_line, given, option

CLI = Path(__file__).resolve().parent.parent / "mambaxfer_cli" / "cli"
MOST_PARAMETERS = 12
FUNCTIONS = {info.callback.__name__: info.callback.function for info in app.registered_commands}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_a_command_takes_groups_and_few_options(name):
    parameters = inspect.signature(FUNCTIONS[name]).parameters
    assert len(parameters) <= MOST_PARAMETERS, (name, list(parameters))


def _declared_flags() -> Counter:
    """Each flag named by an ``option(...)`` call in cli/, counted once per call."""
    found: Counter = Counter()
    for path in CLI.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "option":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        found.update(name for name in arg.value.split("/") if name.startswith("-"))
    return found


def test_each_flag_is_declared_once():
    declared = _declared_flags()
    assert "--vllm-version" in declared and "--model" in declared
    # bench's --request-blocks is a sweep (a list of sizes), not the request's one size
    twice = {flag: n for flag, n in declared.items() if n > 1 and flag != "--request-blocks"}
    assert not twice
    assert declared["--request-blocks"] == 2


def test_every_command_line_flag_comes_from_a_declaration():
    declared = set(_declared_flags())
    for name, built in commands().items():
        for param in built.params:
            if param.param_type_name == "option" and param.name != "help":
                assert set(param.opts + param.secondary_opts) <= declared, (name, param.opts)


@dataclasses.dataclass(frozen=True)
class Pair(Group):
    left: int | None = option("--left", help="Left.", panel=ENGINES)
    right: str = option("--right", help="Right.", panel=ENGINES, default="r")


def test_a_group_comes_back_as_its_value():
    seen = []

    @command(uses={"model": ModelArgs.given("model", "variant")}, required=("model",), defaults={"right": "x"})
    def probe(model: ModelArgs, pair: Pair, request: RequestArgs,
              own: int = option("--own", help="Own.", panel=ENGINES, default=3)) -> None:
        seen.append((model, pair, request, own))

    probe_app = typer.Typer(add_completion=False)
    probe_app.command()(probe)
    built = typer.main.get_command(probe_app)
    names = {name for param in built.params for name in param.opts}
    assert "--variant" in names and "--conv-dtype" not in names and "--seed" in names
    built.main(["--model", "jamba", "--left", "2", "--seed", "5", "--coalesce"], standalone_mode=False)
    model, pair, request, own = seen[0]
    assert model == ModelArgs(model="jamba") and pair == Pair(left=2, right="x") and own == 3
    assert request.seed == 5 and request.coalesce and request.reads() == "exact"
    with pytest.raises(typer.TyperException) as missing:
        built.main([], standalone_mode=False)
    assert missing.value.format_message() == "Missing option '--model' / '-m'."


def _parsed(function, line: list[str]) -> dict:
    """The values typer hands ``function`` registered alone, for the options of ``line``."""
    probe = typer.Typer()
    probe.command()(function)
    built = typer.main.get_command(probe)
    with built.make_context("probe", list(line)) as ctx:     # typer takes the words off the list
        return ctx.params


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_line_declares_only_the_options_it_names(name):
    """Start-up: typer builds a validator for each option a command declares, so a line gets only
    the options it names; those it leaves out get what typer gives an option not given."""
    target = COMMANDS[name][0].partition(":")
    function = getattr(importlib.import_module(target[0]), target[2])
    whole = inspect.signature(for_line(function, None)).parameters
    required = [p for p in whole.values() if p.default is inspect.Parameter.empty and p.name != "ctx"]
    flag = {name: flag for flag, name in reversed(function.flags.items())}     # each option's first name
    line = [value for p in required for value in (flag[p.name], "1")]
    given_whole, given_narrowed = _parsed(for_line(function, None), line), _parsed(for_line(function, [name, *line]),
                                                                                    line)
    assert set(given_narrowed) <= set(given_whole) and (len(given_narrowed) < len(given_whole) or not function.flags)
    assert [p.name for p in required] == [n for n in given_narrowed if n in {p.name for p in required}]
    for left, value in given_whole.items():
        if left not in given_narrowed:     # what the function fills: the signature's default
            assert value == whole[left].default and type(value) is type(whole[left].default), (left, value)
    for line in (["--help"], ["-h"], ["--bogus"], ["-m1"], ["--", "x"]):     # help, and what typer rejects
        assert inspect.signature(for_line(function, [name, *line])).parameters.keys() == whole.keys(), line


def test_plan_imports_no_other_engine_nor_readers_it_does_not_use():
    """``plan --format json`` imports what it runs: not SGLang's package (for --engine's help) nor
    vLLM's serve-line reader."""
    script = ("import atexit, sys; atexit.register(lambda: print(sorted(sys.modules), file=sys.stderr)); "
              "sys.argv = ['mambaxfer', 'plan', '--model', 'jamba', '--p-tp', '1', '--d-tp', '4', '--format', "
              "'json']; from mambaxfer_cli.__main__ import main; main()")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout)["schema"] == "mambaxfer.plan/v1", done.stderr
    imported = ast.literal_eval(done.stderr.strip().splitlines()[-1])
    assert "mambaxfer_cli.engines.vllm.plan" in imported
    assert not [m for m in imported if m.startswith("mambaxfer_cli.engines.sglang") or m.endswith("serve_args")]


def test_p_and_d_forms_fall_back_to_the_shared_value():
    from mambaxfer_cli.engines.vllm.options import build

    built = build(EngineArgs(vllm_version="0.33", p_vllm_version="0.34", block_size=32, d_block_size=64))
    assert (built.prefill.release.name, built.decode.release.name) == ("0.34", "0.33")
    assert (built.prefill.block_size, built.decode.block_size) == (32, 64)


LIBRARIES = ("click", "rich", "typer")


def test_no_private_name_or_patched_method_of_the_cli_libraries():
    """The command line uses typer's and rich's public API only, and changes none of theirs."""
    package = CLI.parent
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {alias.asname or alias.name.split(".")[0]: node
                    for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                    for alias in node.names
                    if (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0] in LIBRARIES}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARIES:
                assert not any(a.name.startswith("_") for a in node.names), (path, node.lineno)
                assert not any(part.startswith("_") for part in (node.module or "").split(".")), (path, node.lineno)
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                root = node.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                assert not (isinstance(root, ast.Name) and root.id in imported), (path, node.lineno, node.attr)
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    root = target
                    while isinstance(root, ast.Attribute):
                        root = root.value
                    assert not (isinstance(target, ast.Attribute) and isinstance(root, ast.Name)
                                and root.id in imported), (path, node.lineno)


@dataclasses.dataclass(frozen=True)
class Switch(Group):
    caching: bool | None = option("--caching/--no-caching", help="Caching.", panel=ENGINES)


def test_a_switch_is_on_off_or_its_default():
    """A switch declared "--on/--off": typer shows "--on" with "--off" named in its help (so the
    80-column help never cuts the pair), and both flags still work."""
    seen = []

    @command()
    def probe(switch: Switch) -> None:
        seen.append((switch.caching, given("caching")))

    app = typer.Typer()
    app.command()(probe)
    runner = CliRunner()
    for args, value in (([], (None, False)), (["--caching"], (True, True)), (["--no-caching"], (False, True))):
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert seen.pop() == value
    both = runner.invoke(app, ["--caching", "--no-caching"])
    assert both.exit_code == 2 and "give one of --caching and --no-caching, not both" in both.output
    shown = runner.invoke(app, ["--help"], env={"COLUMNS": "120"}).output
    assert "--no-caching" not in shown.split("Caching.")[0] and "Off: --no-caching." in shown
