"""Every string in an audit record is bounded, so a caller cannot grow the log at will (a 4 MB
tool name or JSON-RPC id would otherwise be written in full on every request).

A long string keeps its first ``MAX_STRING_BYTES`` bytes and a SHA-256 of the rest, so the
operator can still tell values apart and check a suspected value. Tool arguments are exempt:
:mod:`clawpod.sidecar.audit.trace` already bounds that copy as a whole.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

MAX_STRING_BYTES = 256
# Strings of at most this many characters are never cut (see bounded_string).
_SHORT_CHARS = MAX_STRING_BYTES // 4
# In compact JSON without escapes every string is a quote and a run of bytes without one, at
# least as long as its characters; a run after a closing quote (numbers, punctuation) only
# makes a false "maybe".
_LONG_STRING = re.compile(rb'"[^"]{%d}' % (_SHORT_CHARS + 1))
# Where the bounded argument copy sits: record["tool_trace"][i]["calls"][j]["arguments"].
_TRACE = "tool_trace"


def bounded_record(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with every over-long string (value or key) cut; the same object when none is."""
    changed = False
    result: dict[str, Any] = {}
    for key, value in record.items():
        new_key = bounded_string(key) if isinstance(key, str) else key
        new_value = _bounded_trace(value) if key == _TRACE else _bounded(value)
        changed = changed or new_key is not key or new_value is not value
        result[new_key] = new_value
    return result if changed else record


def may_hold_long_strings(text: bytes) -> bool:
    """False when no string in JSON ``text`` (key or value, at any depth) could be cut: a
    scan in C where ``bounded_record`` calls Python per value, and most records hold only
    short strings. True means "maybe": the walk decides."""
    return b"\\" in text or _LONG_STRING.search(text) is not None


def bounded_string(text: str) -> str:
    # A UTF-8 encoding is never shorter than the number of characters: skip the encode.
    if len(text) <= _SHORT_CHARS:
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_STRING_BYTES:
        return text
    kept = data[:MAX_STRING_BYTES].decode("utf-8", "ignore")
    rest = data[len(kept.encode("utf-8", "surrogatepass")) :]
    return f"{kept}...(cut {len(rest)} bytes, sha256 {hashlib.sha256(rest).hexdigest()})"


def _bounded(value: Any) -> Any:
    if isinstance(value, str):
        return bounded_string(value)
    if isinstance(value, dict):
        return bounded_record(value)
    if isinstance(value, list):
        items = [_bounded(item) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value


def _bounded_trace(trace: Any) -> Any:
    """A tool trace: rounds of calls; each call's ``arguments`` is kept as trace.py left it."""
    if not isinstance(trace, list):
        return _bounded(trace)
    return [_bounded_round(round_) for round_ in trace]


def _bounded_round(round_: Any) -> Any:
    if not isinstance(round_, dict) or not isinstance(round_.get("calls"), list):
        return _bounded(round_)
    others = bounded_record({k: v for k, v in round_.items() if k != "calls"})
    return {**others, "calls": [_bounded_call(call) for call in round_["calls"]]}


def _bounded_call(call: Any) -> Any:
    if not isinstance(call, dict) or "arguments" not in call:
        return _bounded(call)
    others = bounded_record({k: v for k, v in call.items() if k != "arguments"})
    return {**others, "arguments": call["arguments"]}
