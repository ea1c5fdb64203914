"""Each wire protocol has one home under ``sidecar/codecs/`` (``chat/``, ``messages/``,
``responses/``) that owns its requests, answers and streams, translation's side included, so
translation is a read in one home and a write in another: no string of a protocol's wire (an
event, a field, an object type) is spelled outside its home, and ``sidecar/translation/`` spells
none at all."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SIDECAR = Path(__file__).resolve().parents[2] / "sidecar"
# Strings of each protocol's wire that no other protocol has.
WIRE = {
    "chat": ("chat.completion", "finish_reason", "prompt_tokens", "reasoning_content"),
    "messages": ("content_block", "message_start", "stop_reason", "input_json_delta"),
    "responses": ("response.output", "output_text", "function_call_output", "sequence_number"),
}


def strings_in(path: Path) -> set[str]:
    """The string constants of a module, its docstrings left out (prose may name anything)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in docstrings:
            if isinstance(node.value, str):
                found.add(node.value)
            elif isinstance(node.value, bytes):
                found.add(node.value.decode("utf-8", "replace"))
    return found


def spelled(path: Path, words: tuple[str, ...]) -> list[str]:
    return sorted({w for s in strings_in(path) for w in words if w in s})


def test_translation_spells_no_protocol() -> None:
    modules = sorted((SIDECAR / "translation").rglob("*.py"))
    assert modules
    every = tuple(w for words in WIRE.values() for w in words)
    found = {str(m.relative_to(SIDECAR)): spelled(m, every) for m in modules}
    assert not any(found.values()), found


@pytest.mark.parametrize("protocol", sorted(WIRE))
def test_a_protocol_is_spelled_only_in_its_home(protocol: str) -> None:
    home = SIDECAR / "codecs" / protocol
    assert (home / "codec.py").is_file() and (home / "neutral_stream.py").is_file()
    others = tuple(w for p, words in WIRE.items() if p != protocol for w in words)
    found = {str(m.relative_to(SIDECAR)): spelled(m, others) for m in sorted(home.rglob("*.py"))}
    assert not any(found.values()), found
