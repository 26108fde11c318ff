"""Imports go one way: no circle among a package's modules, and no module imports another's
private names (what two modules share gets a public home). Read from the source (the AST), so that
an import inside a function counts as much as one at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The parts held to it here (the others follow as they are reworked).
SCOPES = ("mambaxfer_cli.execute", "mambaxfer_cli.exits", "mambaxfer_cli.__main__")


def modules() -> dict[str, Path]:
    found = {}
    for path in (ROOT / "mambaxfer_cli").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> list[tuple[str, str]]:
    """(module, name) for each name ``path`` imports from mambaxfer_cli (name "" for a whole module)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mambaxfer_cli"):
            for alias in node.names:
                whole = f"{node.module}.{alias.name}"
                out.append((whole, "") if whole in known else (node.module, alias.name))
        elif isinstance(node, ast.Import):
            out.extend((alias.name, "") for alias in node.names if alias.name.startswith("mambaxfer_cli"))
    return out


def in_scope(name: str) -> bool:
    return any(name == scope or name.startswith(scope + ".") for scope in SCOPES)


def test_no_private_name_is_imported_from_another_module():
    known = modules()
    private = [(name, module, imported) for name, path in known.items() if in_scope(name)
               for module, imported in imports(path, known)
               if imported.startswith("_") and not imported.startswith("__")]
    assert private == []


def test_no_import_circle():
    known = modules()
    graph = {name: {m for m, _ in imports(path, known) if m in known and m != name}
             for name, path in known.items()}
    circles = []

    def visit(name: str, path: list[str]) -> None:
        for target in sorted(graph[name]):
            if target in path:
                circles.append(path[path.index(target):] + [target])
            elif in_scope(target) and target not in done:
                visit(target, path + [target])
        done.add(name)

    done: set[str] = set()
    for name in sorted(graph):
        if in_scope(name):
            visit(name, [name])
    assert circles == []


@pytest.mark.parametrize("module", ["mambaxfer_cli.execute.rank", "mambaxfer_cli.execute.bench_rank"])
def test_rank_programs_share_their_machinery_through_public_modules(module):
    # Execute's and bench's rank programs both build on agent and channel, and neither imports the other.
    known = modules()
    used = {m for m, _ in imports(known[module], known)}
    assert {"mambaxfer_cli.execute.agent", "mambaxfer_cli.execute.channel"} <= used
    assert not used & {"mambaxfer_cli.execute.rank", "mambaxfer_cli.execute.bench_rank"} - {module}
