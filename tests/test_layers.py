"""The sidecar's layers: each imports only from its own layer and those below it, no module
imports itself back through others, and the lower layers load no I/O library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.import_graph import assert_no_circles, clawpod_imports, module_name

SIDECAR = Path(__file__).resolve().parents[1] / "sidecar"
PACKAGE = "clawpod.sidecar"
# Bottom to top. A module may import from its own layer and the layers before it.
LAYERS: list[tuple[str, ...]] = [
    ("manifest", "path_template", "build_signature", "model"),
    ("codecs",),
    ("translation",),
    ("mediation",),
    (
        "observability",
        "transport",
        "audit",
        "tasks",
        "credential_files",
        "request_body",
        "identity",
    ),
    ("state",),
    ("backends",),
    ("execution",),
    ("governance",),
    ("mcp",),
    ("server", "__main__"),
]
SERVER = PACKAGE + ".server"
# ``server/``'s rooms, bottom to top; the last holds the modules of ``server/`` itself.
SERVER_ROOMS: list[tuple[str, ...]] = [
    ("front", "providers"),
    ("request",),
    ("accounting", "failover", "operator"),
    ("translated",),
    ("mediated",),
    ("llm",),
    ("app", "admin", "routes"),
]
# What only a model request needs: the operator plane (API, console) imports none of it.
LLM_PATH = ("providers", "accounting", "failover", "translated", "mediated", "llm")
IO_LIBRARIES = ("aiohttp", "httptools", "jsonschema", "prometheus_client", "uvloop")
SANS_IO = ["manifest", "model", "codecs", "translation", "mediation.engine", "mediation.commands"]


def rank(module: str) -> int:
    top = module.removeprefix(PACKAGE + ".").split(".")[0]
    return next(i for i, layer in enumerate(LAYERS) if top in layer)


GRAPH = {module_name(p): clawpod_imports(p, PACKAGE) for p in sorted(SIDECAR.rglob("*.py"))}


def test_every_package_has_a_layer() -> None:
    for module in GRAPH:
        if module != PACKAGE:
            rank(module)  # raises StopIteration for a package no layer names


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if m != PACKAGE))
def test_no_upward_import(module: str) -> None:
    upward = [i for i in GRAPH[module] if i != PACKAGE and rank(i) > rank(module)]
    assert not upward, f"{module} (layer {rank(module)}) imports from above: {upward}"


def test_no_import_circles() -> None:
    assert_no_circles({m: {i for i in deps if i in GRAPH} for m, deps in GRAPH.items()})


@pytest.mark.parametrize("lower", SANS_IO)
def test_lower_layers_load_no_higher_layer_and_no_io_library(lower: str) -> None:
    """Imported in a fresh interpreter, a sans-IO layer brings nothing above it along."""
    target = f"{PACKAGE}.{lower}"
    script = f"import sys, {target}; print('\\n'.join(sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    higher = [m for m in loaded if m.startswith(PACKAGE + ".") and rank(m) > rank(target)]
    io = [m for m in loaded if m.split(".")[0] in IO_LIBRARIES]
    assert not higher, f"{target} loads {higher}"
    assert not io, f"{target} loads I/O libraries {sorted({m.split('.')[0] for m in io})}"


def server_room(module: str) -> str:
    """``mediated`` for ``….server.mediated.model_call``; ``app`` for ``….server.app``."""
    return module.removeprefix(SERVER + ".").split(".")[0]


def server_rank(module: str) -> int:
    room = server_room(module)
    return next(i for i, rooms in enumerate(SERVER_ROOMS) if room in rooms)


SERVER_MODULES = sorted(m for m in GRAPH if m.startswith(SERVER + "."))


def test_every_server_module_has_a_room() -> None:
    for module in SERVER_MODULES:
        server_rank(module)  # raises StopIteration for a module no room names


@pytest.mark.parametrize("module", SERVER_MODULES)
def test_no_server_room_imports_one_above_it(module: str) -> None:
    inside = [i for i in GRAPH[module] if i.startswith(SERVER + ".")]
    upward = [i for i in inside if server_rank(i) > server_rank(module)]
    assert not upward, f"{module} (room {server_room(module)}) imports from above: {upward}"


@pytest.mark.parametrize("module", [m for m in SERVER_MODULES if server_room(m) == "operator"])
def test_the_operator_plane_imports_nothing_of_the_llm_path(module: str) -> None:
    llm = [i for i in GRAPH[module] if i.startswith(SERVER + ".") and server_room(i) in LLM_PATH]
    assert not llm, f"{module} imports the LLM path: {llm}"


def test_the_graph_sees_relative_and_absolute_imports() -> None:
    """A resolver that lost imports would let every other test here pass on an empty graph."""
    assert "clawpod.sidecar.mediation.engine" in GRAPH["clawpod.sidecar.server.mediated.mediated"]
    assert sum(map(len, GRAPH.values())) > 300
