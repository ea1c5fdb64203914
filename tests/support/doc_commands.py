"""The shell blocks of the project's docs, as a newcomer would run them.

Convention (docs/contract.md "Docs are code"): a command block is fenced as ```sh. A block that
cannot run on a plain machine carries an HTML comment on the line just before its fence,
``<!-- requires: docker -->`` (or ``swarm``, ``kubernetes``, ``browser``, ``network``,
``model``, or any other word naming what it needs); a block that another test already runs
says which, ``<!-- tested-by: tests/demo/test_demo_script.py -->``. Every other ``sh`` block
runs. A block that shows a command's output says which command, ``<!-- output-of: clawc
inspect ... -->``, and must be exactly what that command prints. Markdown is parsed by
markdown-it-py (CommonMark), not by hand.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

SHELL_FENCES = frozenset({"sh", "bash", "shell"})
_MARKER = re.compile(r"<!--\s*(requires|tested-by)\s*:\s*(.+?)\s*-->", re.DOTALL)
_OUTPUT_OF = re.compile(r"<!--\s*output-of\s*:\s*(.+?)\s*-->", re.DOTALL)


@dataclass(frozen=True, slots=True)
class CommandBlock:
    doc: Path
    line: int  # of the opening fence, 1-based
    script: str
    requires: str | None = None
    """Why it does not run here (``requires: docker``), or the test that runs it."""

    @property
    def where(self) -> str:
        return f"{self.doc.name}:{self.line}"


def command_blocks(doc: Path) -> list[CommandBlock]:
    """The ``sh`` blocks of ``doc``, in order, each with the marker just before it, if any."""
    tokens = MarkdownIt("commonmark").parse(doc.read_text(encoding="utf-8"))
    blocks = []
    for previous, token in zip([None, *tokens], tokens, strict=False):
        if token.type != "fence" or token.info.split()[:1] not in ([f] for f in SHELL_FENCES):
            continue
        assert token.map is not None
        marker = None
        if previous is not None and previous.type == "html_block":
            found = _MARKER.search(previous.content)
            if found:
                marker = f"{found.group(1)}: {found.group(2)}"
        blocks.append(CommandBlock(doc, token.map[0] + 1, token.content, marker))
    return blocks


@dataclass(frozen=True, slots=True)
class OutputBlock:
    doc: Path
    line: int
    command: str
    expected: str

    @property
    def where(self) -> str:
        return f"{self.doc.name}:{self.line}"


def output_blocks(doc: Path) -> list[OutputBlock]:
    """The fenced blocks marked ``<!-- output-of: COMMAND -->``: what COMMAND prints."""
    tokens = MarkdownIt("commonmark").parse(doc.read_text(encoding="utf-8"))
    blocks = []
    for previous, token in itertools.pairwise(tokens):
        if token.type == "fence" and previous.type == "html_block":
            found = _OUTPUT_OF.search(previous.content)
            if found:
                assert token.map is not None
                blocks.append(OutputBlock(doc, token.map[0] + 1, found.group(1), token.content))
    return blocks


def port_variables(script: str) -> list[str]:
    """Variables a doc reads as ``${NAME_PORT:-8000}``: a test gives each a free port."""
    return sorted(set(re.findall(r"\$\{([A-Z][A-Z0-9_]*_PORT):-\d+\}", script)))
