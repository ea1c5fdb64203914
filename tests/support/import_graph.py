"""Import graphs of the tree, for the layer and program tests."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Each program's folder and the package it is installed as (pyproject.toml's package-dir).
PROGRAMS = {"cli": "clawpod.cli", "compiler": "clawpod.compiler", "sidecar": "clawpod.sidecar"}


def module_name(path: Path) -> str:
    """``clawpod.sidecar.server.app`` for ``sidecar/server/app.py``; a package for its __init__."""
    parts = path.resolve().relative_to(REPO).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join((PROGRAMS[parts[0]], *parts[1:]))


def imported_from(path: Path) -> Iterator[tuple[str, list[str]]]:
    """Each module ``path`` imports from (relative imports resolved against its package; type
    checking imports included) with the names it takes."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            source = ".".join([*base, node.module]) if node.level and node.module else None
            source = source or (".".join(base) if node.level else node.module or "")
            yield source, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []


def clawpod_imports(path: Path, prefix: str = "clawpod.") -> set[str]:
    """Every module under ``prefix`` that ``path`` imports."""
    return {source for source, _ in imported_from(path) if source.startswith(prefix)}


def assert_no_circles(graph: dict[str, set[str]]) -> None:
    """Fail naming the first circle of ``graph`` (node -> the nodes it imports)."""
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        if node in done:
            return
        assert node not in visiting, " -> ".join([*visiting[visiting.index(node) :], node])
        visiting.append(node)
        for dependency in sorted(graph.get(node, set()) - {node}):
            visit(dependency)
        visiting.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)
