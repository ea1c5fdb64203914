"""The three programs' direction: ``cli/`` (clawc) over ``compiler/`` over ``sidecar/``. The
sidecar imports neither of the others, the compiler never imports the command line, and the
compiler's modules import each other without circles (docs/architecture.md, "The compiler")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.import_graph import assert_no_circles, clawpod_imports, module_name
from tests.test_layers import LAYERS

REPO = Path(__file__).resolve().parents[1]
PROGRAMS = ("cli", "compiler", "sidecar")  # top to bottom
CONTRACT = LAYERS[0]  # the sidecar's bottom layer: what the compiler and the sidecar share


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


COMPILER = {m: {i for i in GRAPH[m] if program_of(i) == "compiler"} for m in GRAPH}
COMPILER = {m: deps for m, deps in COMPILER.items() if program_of(m) == "compiler"}


def package_of(module: str) -> str:
    """``clawpod.compiler.pod_file`` for its modules; a top-level module stands for itself."""
    return ".".join(module.split(".")[:3])


def test_the_compiler_has_no_import_circles() -> None:
    assert_no_circles(COMPILER)


def test_the_compiler_packages_stack_without_circles() -> None:
    """pod_file < services < agents < governance < pod < output: arrows point one way."""
    packages: dict[str, set[str]] = {}
    for module, deps in COMPILER.items():
        packages.setdefault(package_of(module), set()).update(package_of(d) for d in deps)
    assert_no_circles(packages)


def absolute_clawpod_imports(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        if any(name.split(".")[0] == "clawpod" for name in names):
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("program", PROGRAMS)
def test_imports_inside_the_programs_are_relative(program: str) -> None:
    """An absolute ``clawpod.…`` import names a package whose folder is not ``clawpod/``, so
    tools that follow imports by path draw no arrow for it (docs/architecture.md)."""
    absolute = {
        str(path.relative_to(REPO)): lines
        for path in sorted((REPO / program).rglob("*.py"))
        if (lines := absolute_clawpod_imports(path))
    }
    assert not absolute, f"absolute clawpod imports: {absolute}"


def sidecar_part(module: str) -> str:
    """``manifest`` for ``clawpod.sidecar.manifest``, ``model`` for ``clawpod.sidecar.model.x``."""
    return module.split(".")[2] if module.count(".") >= 2 else ""


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if program_of(m) == "compiler"))
def test_the_compiler_reads_only_the_sidecars_contract(module: str) -> None:
    """The compiler writes what the sidecar reads: it shares the contract's layer (the build's
    models, the rules' language, the environment's names), never the sidecar's internals."""
    beyond = sorted(
        i for i in GRAPH[module] if program_of(i) == "sidecar" and sidecar_part(i) not in CONTRACT
    )
    assert not beyond, f"{module} imports sidecar internals: {beyond}"
