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


def _imports(module: str) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) of every import statement, at any depth."""
    out = []
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            out += [(alias.name, None, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node)
            for alias in node.names:
                child = f"{target}.{alias.name}"
                out.append((child, None, node.lineno) if child in MODULES else (target, alias.name, node.lineno))
    return out


def _graph() -> dict[str, set[str]]:
    graph = {}
    for module in MODULES:
        edges = set()
        for target, _, _ in _imports(module):
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
NOT_IN_CORE = ("torch", "nixl", "vllm", "sglang", "mambaxfer_cli.execute", "mambaxfer_cli.bench")


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
                         "mambaxfer_cli.proof.check": ["mambaxfer_cli.engines.vllm.plan"],
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


def test_the_code_map_check_sees_a_new_folder(tmp_path):
    (tmp_path / "mambaxfer_cli" / "room").mkdir(parents=True)
    (tmp_path / "mambaxfer_cli" / "room" / "__init__.py").write_text("")
    (tmp_path / "mambaxfer_cli" / "releases" / "v0_35").mkdir(parents=True)
    (tmp_path / "mambaxfer_cli" / "releases" / "v0_35" / "__init__.py").write_text("")
    assert _folders(tmp_path / "mambaxfer_cli") == {"mambaxfer_cli/room"}
