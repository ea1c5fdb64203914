"""Docs that run as written: every ``sh`` block of README.md and docs/*.md that can run on this
machine runs, in order, one shell per document (as a reader types them into one terminal),
in a copy of the repository; blocks marked ``requires:`` are reported, not run. New documents
are picked up as they appear."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from tests.support.doc_commands import (
    CommandBlock,
    OutputBlock,
    command_blocks,
    output_blocks,
    port_variables,
)

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# What a reader's checkout holds that the commands use; build output is left behind.
COPIED = ("README.md", "pyproject.toml", "docs", "compose", "descriptors", "scripts")
# A hung block must not hang the suite; not a timing assertion.
DOC_TIMEOUT_S = 240
DONE = "::doc-block-done::"


def runnable(doc: Path) -> list[CommandBlock]:
    return [b for b in command_blocks(doc) if b.requires is None]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the repository as a reader has it, sharing this one's .venv."""
    root = tmp_path / "clawpod"
    root.mkdir()
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(
                source, root / name, ignore=shutil.ignore_patterns("build", "__pycache__")
            )
        else:
            shutil.copy2(source, root / name)
    (root / ".venv").symlink_to(REPO / ".venv")
    return root


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def script_of(blocks: list[CommandBlock]) -> str:
    parts = ["set -euo pipefail"]
    for number, block in enumerate(blocks):
        parts += [f"# {block.where}", block.script, f"echo '{DONE}{number}'"]
    return "\n".join(parts) + "\n"


def run_doc(blocks: list[CommandBlock], checkout: Path, home: Path) -> subprocess.CompletedProcess:
    script = script_of(blocks)
    env = {
        "PATH": f"{checkout / '.venv' / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        **{name: str(free_port()) for name in port_variables(script)},
    }
    log = home / "doc-output.log"
    with log.open("w") as output:
        # Output to a file, not a pipe: a server the doc left running would hold a pipe open.
        process = subprocess.Popen(
            ["bash", "-c", script],
            cwd=checkout,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: whatever it left running ends
        )
        try:
            process.wait(timeout=DOC_TIMEOUT_S)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            process.wait()
    out = log.read_text()
    return subprocess.CompletedProcess(process.args, process.returncode, out)


@pytest.mark.timeout(DOC_TIMEOUT_S + 60)
@pytest.mark.parametrize("doc", DOCS, ids=lambda d: d.relative_to(REPO).as_posix())
def test_the_docs_commands_run_as_written(doc: Path, checkout: Path, tmp_path: Path) -> None:
    blocks = runnable(doc)
    skipped = [f"{b.where} ({b.requires})" for b in command_blocks(doc) if b.requires]
    if not blocks:
        pytest.skip(f"no block runs here; marked: {', '.join(skipped) or 'none'}")
    home = tmp_path / "home"
    home.mkdir()
    done = run_doc(blocks, checkout, home)
    finished = done.stdout.count(DONE)
    if done.returncode != 0 or finished != len(blocks):
        failed = blocks[min(finished, len(blocks) - 1)]
        pytest.fail(
            f"{failed.where}: the block failed (exit {done.returncode}):\n"
            f"{failed.script}\n--- output ---\n{done.stdout[-6000:]}"
        )


def test_markers_name_what_a_block_needs() -> None:
    """A ``tested-by`` marker names a test file that exists; a ``requires`` marker a word."""
    for doc in DOCS:
        for block in command_blocks(doc):
            if block.requires and block.requires.startswith("tested-by: "):
                test = REPO / block.requires.removeprefix("tested-by: ")
                assert test.is_file(), f"{block.where}: {block.requires} names no test file"


OUTPUTS = [block for doc in DOCS for block in output_blocks(doc)]


@pytest.mark.parametrize("block", OUTPUTS, ids=lambda b: b.where)
def test_shown_output_is_what_the_command_prints(
    block: OutputBlock, checkout: Path, tmp_path: Path
) -> None:
    """The example pod compiled in a fresh checkout, then the block's command, exactly."""
    compile_example = CommandBlock(
        block.doc, block.line, ".venv/bin/clawc compile compose/examples/trading-desk/pod.yml"
    )
    home = tmp_path / "home"
    home.mkdir()
    assert run_doc([compile_example], checkout, home).returncode == 0
    shown = subprocess.run(
        ["bash", "-c", block.command],
        cwd=checkout,
        env={"PATH": f"{checkout / '.venv' / 'bin'}:/usr/bin:/bin", "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=DOC_TIMEOUT_S,
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == block.expected, f"{block.where} shows drifted output"
