"""The package's shape, read from its source: imports go one way (no module imports, directly or
through others, a module that imports it back) and no module imports another's private names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "mambaxfer_cli"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not MODULES[module].name == "__init__.py":
        base = base[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _type_only(tree: ast.AST) -> set[int]:
    """The ids of the imports under ``if TYPE_CHECKING:``: read by the type checker, never run."""
    return {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
            and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
            for statement in block.body for node in ast.walk(statement)}


def _imports(module: str, typing: bool = True) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) of every import statement, at any depth
    (``typing=False``: those the program runs, not the type checker's alone)."""
    out = []
    tree = ast.parse(MODULES[module].read_text())
    skipped = set() if typing else _type_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            out += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            for alias in node.names:
                child = f"{target}.{alias.name}"
                out.append((child, None, node.lineno) if child in MODULES else (target, alias.name, node.lineno))
    return out


def _graph() -> dict[str, set[str]]:
    """Who imports whom when the program runs: the type checker's own imports (the protocol's
    option groups, ``if TYPE_CHECKING:``) close no circle."""
    graph = {}
    for module in MODULES:
        edges = set()
        for target, _, _ in _imports(module, typing=False):
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != module and target != "mambaxfer_cli":
                edges.add(target)
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module (or one that imports itself)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    assert _cycles(_graph()) == []


def test_no_private_name_imported_across_modules():
    private = [f"{module}:{line} imports {name} from {target}"
               for module in MODULES for target, name, line in _imports(module)
               if target.startswith("mambaxfer_cli") and name and name.startswith("_") and not name.startswith("__")
               and target != module]
    assert private == []


def test_the_checks_see_a_circle_and_a_private_import():
    # The checks themselves can fail: a made-up pair of modules that import each other.
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


# --- the seam: the core knows no serving engine -----------------------------------------------------

# The core: the model, its variants, the exact layout and reads, and the readers of model configs.
CORE = ("mambaxfer_cli.planning", "mambaxfer_cli.readers", "mambaxfer_cli.families", "mambaxfer_cli.schema",
        "mambaxfer_cli.errors", "mambaxfer_cli.exits", "mambaxfer_cli.limits")
ENGINES = "mambaxfer_cli.engines"
NOT_IN_CORE = ("torch", "nixl", "vllm", "sglang", "mambaxfer_cli.execute")


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _engine_of(module: str) -> str | None:
    """The engine package a module is in (``vllm`` for ``mambaxfer_cli.engines.vllm.plan``)."""
    parts = module.split(".")
    return parts[2] if _within(module, ENGINES) and len(parts) > 2 else None


def _seam_breaks(imports: dict[str, list[str]]) -> list[str]:
    """Imports across the seam: the core importing an engine (or torch, NIXL, an engine's own
    package, execute), the engines' registry importing an engine, an engine importing another."""
    broken = []
    for module, targets in imports.items():
        for target in targets:
            core = any(_within(module, c) for c in CORE)
            if core and (_within(target, ENGINES) or any(_within(target, n) for n in NOT_IN_CORE)):
                broken.append(f"{module} (core) imports {target}")
            elif module == ENGINES and _engine_of(target):
                broken.append(f"{module} (the registry) imports {target}")
            elif _engine_of(module) and _engine_of(target) not in (None, _engine_of(module)):
                broken.append(f"{module} imports another engine's {target}")
    return broken


def test_the_core_imports_no_engine():
    imports = {module: [target for target, _, _ in _imports(module)] for module in MODULES}
    assert _seam_breaks(imports) == []
    assert any(_within(m, "mambaxfer_cli.planning") for m in imports)     # the core is where CORE says


def test_the_seam_check_sees_a_break():
    assert _seam_breaks({"mambaxfer_cli.planning.model": ["mambaxfer_cli.engines.vllm.release"],
                         "mambaxfer_cli.readers.x": ["torch"],
                         "mambaxfer_cli.engines": ["mambaxfer_cli.engines.vllm"],
                         "mambaxfer_cli.engines.sglang.plan": ["mambaxfer_cli.engines.vllm.plan"],
                         "mambaxfer_cli.engines.vllm.proof.check": ["mambaxfer_cli.engines.vllm.plan"],
                         "mambaxfer_cli.engines.vllm.plan": ["mambaxfer_cli.planning.model"]}) == [
        "mambaxfer_cli.planning.model (core) imports mambaxfer_cli.engines.vllm.release",
        "mambaxfer_cli.readers.x (core) imports torch",
        "mambaxfer_cli.engines (the registry) imports mambaxfer_cli.engines.vllm",
        "mambaxfer_cli.engines.sglang.plan imports another engine's mambaxfer_cli.engines.vllm.plan"]


# --- docs/architecture.md's code map is the package's folders ----------------------------------------

def _code_map() -> set[str]:
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    return {m.rstrip("/") for m in re.findall(r"^### `(mambaxfer_cli(?:/[\w.]+)*/)`$", text, re.M)}


def _folders(root: Path = PACKAGE) -> set[str]:
    """Every folder of the package with a file in it, one release's folder aside (its registry's
    entry names those)."""
    return {str(p.relative_to(root.parent)) for p in [root, *root.rglob("*")]
            if p.is_dir() and p.name != "__pycache__" and not RELEASE_FOLDER.match(p.name)
            and any(f.is_file() for f in p.iterdir())}


RELEASE_FOLDER = re.compile(r"^v\d+_\d+$")


def test_the_code_map_is_the_folders():
    assert _code_map() == _folders()


def _touched_paths(text: str) -> list[str]:
    """The paths "What a change touches" names: its table's cells in backquotes that look like files
    or folders (``NAME``, ``X_Y``, ``X_Y_Z`` stand for any name)."""
    table = text.split("## What a change touches", 1)[1].split("\n## ", 1)[0]
    return [c for c in re.findall(r"`([\w./-]+)`", table) if "/" in c or c.endswith((".py", ".json"))]


def _exists(pattern: str, root: Path) -> bool:
    glob = re.sub(r"NAME|X_Y_Z|X_Y", "*", pattern)
    return any(next(base.glob(glob), None) is not None for base in (root / "mambaxfer_cli", root))


def test_what_a_change_touches_names_real_paths():
    root = PACKAGE.parent
    named = _touched_paths((root / "docs" / "architecture.md").read_text())
    assert len(named) >= 15
    assert [p for p in named if not _exists(p, root)] == []


def test_the_touch_table_check_sees_a_missing_path():
    text = "## What a change touches\n| a | `engines/NAME/__init__.py`, `cli/nosuch_cmd.py` |\n## Code map\n"
    assert _touched_paths(text) == ["engines/NAME/__init__.py", "cli/nosuch_cmd.py"]
    assert [p for p in _touched_paths(text) if not _exists(p, PACKAGE.parent)] == ["cli/nosuch_cmd.py"]


def test_the_code_map_check_sees_a_new_folder(tmp_path):
    (tmp_path / "mambaxfer_cli" / "room").mkdir(parents=True)
    (tmp_path / "mambaxfer_cli" / "room" / "__init__.py").write_text("")
    (tmp_path / "mambaxfer_cli" / "releases" / "v0_35").mkdir(parents=True)
    (tmp_path / "mambaxfer_cli" / "releases" / "v0_35" / "__init__.py").write_text("")
    assert _folders(tmp_path / "mambaxfer_cli") == {"mambaxfer_cli/room"}


# --- commands reach an engine only through the registry's protocol -----------------------------------

ENGINE_NAMES = ("vllm", "sglang")
ENGINE_HOMES = ("mambaxfer_cli.engines", "mambaxfer_cli.schema")


def _names_an_engine(node: ast.AST) -> bool:
    """A string constant that is an engine's name, or a tuple/list/set of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.strip().lower() in ENGINE_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_an_engine(element) for element in node.elts)
    return False


def engine_knowledge(module: str, source: str, path: str) -> list[str]:
    """Where a module outside ``engines/`` and ``schema/`` knows an engine: by its file's name, by
    comparing an engine's name, or by importing an engine's package (the registry aside)."""
    if any(_within(module, home) for home in ENGINE_HOMES):
        return []
    found = [f"{module}: its file is named after an engine"] if any(n in Path(path).name for n in ENGINE_NAMES) \
        else []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(map(_names_an_engine, [node.left, *node.comparators])):
            found.append(f"{module}:{node.lineno} compares an engine's name")
        elif isinstance(node, ast.match_case) and any(_names_an_engine(n) for n in ast.walk(node.pattern)
                                                       if isinstance(n, ast.Constant)):
            found.append(f"{module}:{node.pattern.lineno} matches an engine's name")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            base = _resolve(module, node) if isinstance(node, ast.ImportFrom) and module in MODULES else \
                getattr(node, "module", None) or ""
            targets = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                       [base, *(f"{base}.{alias.name}" for alias in node.names)])
            if any(_engine_of(target) in ENGINE_NAMES for target in targets):
                found.append(f"{module}:{node.lineno} imports an engine's package")
    return found


def test_commands_reach_an_engine_only_through_the_registry():
    found = {module: engine_knowledge(module, path.read_text(), str(path)) for module, path in MODULES.items()}
    assert [said for module in sorted(found) for said in found[module]] == []


def test_the_engine_check_sees_a_planted_break():
    planted = """
from mambaxfer_cli.engines import engine
from mambaxfer_cli.engines.vllm.plan import build_plan
import mambaxfer_cli.engines.sglang.plan
from mambaxfer_cli.engines import sglang
if name.strip().lower() == "sglang" or name in ("vllm", "x"):
    pass
match name:
    case "vllm":
        pass
"""
    assert sorted(engine_knowledge("mambaxfer_cli.cli.x", planted, "mambaxfer_cli/cli/sglang_x.py")) == [
        "mambaxfer_cli.cli.x: its file is named after an engine",
        "mambaxfer_cli.cli.x:3 imports an engine's package",
        "mambaxfer_cli.cli.x:4 imports an engine's package",
        "mambaxfer_cli.cli.x:5 imports an engine's package",
        "mambaxfer_cli.cli.x:6 compares an engine's name",
        "mambaxfer_cli.cli.x:6 compares an engine's name",
        "mambaxfer_cli.cli.x:9 matches an engine's name"]
    assert engine_knowledge("mambaxfer_cli.cli.y", "from mambaxfer_cli.engines import one\n", "cli/y.py") == []
    assert engine_knowledge("mambaxfer_cli.engines.vllm.x", planted, "engines/vllm/x.py") == []


# --- the command line is typer's: help and completion drawn by typer, nothing of it changed --------

CLI_LIBRARIES = ("click", "typer")


def _root(node: ast.AST) -> str | None:
    """The name an expression starts from: ``typer`` for ``typer.main.get_command(app).params``."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _changes_to_cli_libraries(tree: ast.AST) -> list[int]:
    """Lines where a module subclasses a click or typer class, or sets an attribute of a click or
    typer object: a module, a name imported from one, or a name bound to what they make (``app =
    typer.Typer()``, a parameter annotated ``typer.Context``)."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {alias.asname or alias.name.split(".")[0] for alias in node.names
                      if alias.name.split(".")[0] in CLI_LIBRARIES}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in CLI_LIBRARIES:
            bound |= {alias.asname or alias.name for alias in node.names}
    grown = True
    while grown:
        before = len(bound)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and _root(node.value) in bound:
                bound |= {t.id for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                          if isinstance(t, ast.Name)}
            elif isinstance(node, ast.arg) and node.annotation is not None and _root(node.annotation) in bound:
                bound.add(node.arg)
        grown = len(bound) > before
    lines = []
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        if ((isinstance(node, ast.ClassDef) and any(_root(base) in bound for base in node.bases))
                or any(isinstance(t, (ast.Attribute, ast.Subscript)) and _root(t) in bound for t in targets)
                or (isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("setattr", "delattr")
                    and node.args and _root(node.args[0]) in bound)):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_no_module_subclasses_or_changes_click_or_typer():
    changed = {module: lines for module in MODULES
               if (lines := _changes_to_cli_libraries(ast.parse(MODULES[module].read_text())))}
    assert changed == {}


def test_the_check_sees_a_subclass_and_a_patch():
    source = ("import typer\nimport click as c\nfrom typer.core import TyperGroup\n"
              "class Mine(TyperGroup): pass\n"                 # 4
              "class Other(c.Command): pass\n"                 # 5
              "app = typer.Typer()\n"
              "app.info.help = 'x'\n"                          # 7
              "typer.rich_utils.MAX_WIDTH = 10\n"              # 8
              "command = typer.main.get_command(app)\n"
              "setattr(command, 'format_help', print)\n"       # 10
              "def f(ctx: typer.Context):\n"
              "    ctx.obj = 1\n"                              # 12
              "class Fine: pass\n"
              "fine = Fine()\n"
              "fine.x = app\n")
    assert _changes_to_cli_libraries(ast.parse(source)) == [4, 5, 7, 8, 10, 12]


def test_the_command_line_is_a_typer_app():
    import typer

    from mambaxfer_cli.cli import app

    assert isinstance(app, typer.Typer)
