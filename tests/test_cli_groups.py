"""Options declared once, in groups: every command's function takes its groups and a few options of
its own; each flag has one declaration in cli/; a group's options come back as its typed value."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from collections import Counter
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cli_run import commands
from mambaxfer_cli.cli import app
from mambaxfer_cli.cli.options import EngineArgs, ModelArgs, RequestArgs
from mambaxfer_cli.cli.params import ENGINES, Group, command, given, option

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
