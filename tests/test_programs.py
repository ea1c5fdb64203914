"""The three programs' direction: ``cli/`` (clawc) over ``compiler/`` over ``sidecar/``. The
sidecar imports neither of the others, the compiler never imports the command line, and the
compiler's modules import each other without circles (docs/architecture.md, "The compiler")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROGRAMS = ("cli", "compiler", "sidecar")  # top to bottom


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(("clawpod", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def clawpod_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("clawpod."):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("clawpod.")}
    return found


GRAPH = {
    module_name(path): clawpod_imports(path)
    for program in PROGRAMS
    for path in sorted((REPO / program).rglob("*.py"))
}


def program_of(module: str) -> str:
    return module.split(".")[1]


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_program_imports_one_above_it(module: str) -> None:
    rank = PROGRAMS.index(program_of(module))
    upward = sorted(i for i in GRAPH[module] if PROGRAMS.index(program_of(i)) < rank)
    assert not upward, f"{module} imports from a program above it: {upward}"


def test_the_compiler_has_no_import_circles() -> None:
    inside = {m for m in GRAPH if program_of(m) == "compiler"}
    compiler = {m: {i for i in GRAPH[m] if i in inside and i != m} for m in inside}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> None:
        if module in done:
            return
        assert module not in visiting, " -> ".join([*visiting[visiting.index(module) :], module])
        visiting.append(module)
        for dependency in sorted(compiler[module]):
            visit(dependency)
        visiting.pop()
        done.add(module)

    for module in sorted(compiler):
        visit(module)
