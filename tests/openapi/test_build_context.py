"""``clawc import openapi --context DIR DOC``: the document read from inside a service's build
context, confined to it as a descriptor is to the pod's tree (docs/openapi-import.md)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from clawpod.compiler.openapi.document import MAX_DOCUMENT_BYTES
from tests.openapi.importing import FIXTURES, compile_descriptor, run_import

KEY = "sk-test-do-not-leak-0123456789"


@pytest.fixture
def context(tmp_path: Path) -> Path:
    """A build context holding the Petstore document, with a document and a key beside it."""
    build = tmp_path / "petstore"
    (build / "api").mkdir(parents=True)
    shutil.copy(FIXTURES / "petstore-3.0.yaml", build / "api" / "openapi.yaml")
    shutil.copy(FIXTURES / "tictactoe-3.1.yaml", tmp_path / "outside.yaml")
    (tmp_path / ".env").write_text(f"OPENAI_API_KEY={KEY}\n")
    return build


def test_a_document_inside_the_build_context_imports_and_compiles(
    tmp_path: Path, context: Path
) -> None:
    target = tmp_path / "petstore.yaml"
    run = run_import(
        "--context", context, "api/openapi.yaml", "--service", "petstore", "-o", target
    )
    assert run.code == 0, run.err
    assert "3 tool(s), 0 operation(s) skipped" in run.out
    # The same descriptor as importing the file itself (whose name the first line gives).
    direct = run_import(FIXTURES / "petstore-3.0.yaml", "--service", "petstore")
    imported = target.read_text().split("\n", 1)
    assert imported[0].endswith("from openapi.yaml")
    assert imported[1] == direct.out.split("\n", 1)[1]
    assert compile_descriptor(tmp_path, target, "petstore").code == 0


def test_a_document_beside_a_subdirectory_is_found_through_dot_dot_inside(
    context: Path,
) -> None:
    (context / "docs").mkdir()
    run = run_import("--context", context, "docs/../api/openapi.yaml", "--service", "petstore")
    assert run.code == 0, run.err


@pytest.mark.parametrize(
    ("named", "reason"),
    [
        ("../outside.yaml", "it leaves the build context"),
        ("api/../../outside.yaml", "it leaves the build context"),
        ("../.env", "it leaves the build context"),
        ("/etc/passwd", "absolute paths are not allowed (give a path relative to the build"),
    ],
)
def test_paths_that_leave_the_context_are_refused(context: Path, named: str, reason: str) -> None:
    run = run_import("--context", context, named, "--service", "petstore")
    assert run.code == 1
    assert f"cannot read {named!r} from the build context: {reason}" in run.err
    assert "petstore" in run.err.splitlines()[0]  # the error names the context
    assert run.out == "" and KEY not in run.err


def test_an_absolute_path_is_refused_even_when_it_names_a_file_inside(context: Path) -> None:
    inside = context / "api" / "openapi.yaml"
    run = run_import("--context", context, inside, "--service", "petstore")
    assert run.code == 1
    assert "absolute paths are not allowed" in run.err and run.out == ""


@pytest.mark.parametrize("link", ["api/openapi.json", "linked/openapi.yaml"])
def test_a_symlink_out_of_the_context_is_refused(context: Path, link: str) -> None:
    outside = context.parent / "outside.yaml"
    if link.startswith("linked/"):  # a directory on the way that points out
        (context / "linked").symlink_to(context.parent, target_is_directory=True)
        link = "linked/outside.yaml"
    else:
        (context / link).symlink_to(outside)
    run = run_import("--context", context, link, "--service", "tictactoe")
    assert run.code == 1
    assert "a symlink on the way points outside the build context" in run.err
    assert run.out == ""


def test_a_symlink_that_stays_inside_is_followed(context: Path) -> None:
    (context / "openapi.yaml").symlink_to(context / "api" / "openapi.yaml")
    run = run_import("--context", context, "openapi.yaml", "--service", "petstore")
    assert run.code == 0, run.err


def test_an_env_file_inside_the_context_is_refused(context: Path) -> None:
    (context / ".env").write_text(f"OPENAI_API_KEY={KEY}\n")
    run = run_import("--context", context, ".env", "--service", "petstore")
    assert run.code == 1
    assert "it is an env file" in run.err and KEY not in run.err + run.out


def test_the_document_bounds_of_a_file_apply_inside_the_context(context: Path) -> None:
    big = context / "big.json"
    with big.open("wb") as handle:  # sparse: refused on its size before a byte is read
        handle.truncate(MAX_DOCUMENT_BYTES + 1)
    run = run_import("--context", context, "big.json", "--service", "petstore")
    assert run.code == 1
    assert "at most 16,777,216 are read" in run.err
    (context / "api" / "dir.yaml").mkdir()
    run = run_import("--context", context, "api/dir.yaml", "--service", "petstore")
    assert run.code == 1 and "the document is not a regular file" in run.err


def test_a_context_that_is_not_a_directory_is_refused(context: Path) -> None:
    run = run_import("--context", context / "api" / "openapi.yaml", "x.yaml", "--service", "p")
    assert run.code == 1 and "--context is not a directory" in run.err
