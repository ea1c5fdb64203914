"""Canonical forms: JSON with sorted keys, arguments and text whose formatting is irrelevant,
and the digests built from them (continuity keys, argument digests)."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import orjson


def canonical_json(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # integers beyond 64 bits, which the standard library can write
        return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def canonical_arguments(arguments: str | dict[str, Any] | None) -> str:
    """Arguments with key order and whitespace made irrelevant (invalid JSON kept as text)."""
    if arguments is None or arguments == "":
        return "{}"
    if isinstance(arguments, str):
        try:
            arguments = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments.strip()
    return canonical_json(arguments).decode()


def normalise_text(text: str) -> str:
    return " ".join(text.split())


_NOT_ALPHANUMERIC = re.compile(r"[^0-9A-Za-z]")
# Text a proxy puts into a turn it found empty (litellm: "[System: Empty message content
# sanitised to satisfy protocol]"): not part of what the model said.
_PLACEHOLDER = re.compile(r"^\[System: [^\]]*\]$")


def normalise_id(value: object) -> str:
    """A tool-call id as runners may rewrite it: punctuation stripped (OpenClaw turns
    ``call_stub0001_0`` into ``callstub00010``)."""
    return _NOT_ALPHANUMERIC.sub("", str(value or ""))


def identifying_text(texts: list[str]) -> str:
    """The text of a turn however it is split into parts and however they were joined again
    (litellm joins text blocks with nothing between them, others with a space or a newline):
    placeholders and every whitespace aside."""
    return "".join("".join(t.split()) for t in texts if not _PLACEHOLDER.match(t.strip()))


def digest(*parts: str) -> str:
    """SHA-256 of the parts, each followed by a NUL byte, in hex. Hashed in one update: each
    ``update`` costs more than the bytes it hashes, and a request's identities (SPEC §8.2)
    digest dozens of short parts."""
    joined = "\x00".join(parts).encode() + b"\x00" if parts else b""
    return hashlib.sha256(joined).hexdigest()
