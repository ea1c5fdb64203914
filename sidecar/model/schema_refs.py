"""Local ``$ref``s of a JSON Schema (``#/$defs/name``), followed as RFC 6901 pointers: the one
walker the compiler's schema normalisation and the tool-rule conditions' schema readers share."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote


def ref_parts(ref: str) -> list[str]:
    """The reference tokens of a local ``$ref``: ``#/a/b~1c`` gives ``["a", "b/c"]``."""
    return [unquote(raw).replace("~1", "/").replace("~0", "~") for raw in ref[1:].split("/")[1:]]


def resolve_local_ref(root: Any, ref: str) -> Any:
    """What the local ``ref`` points to inside ``root``; :class:`LookupError` when nothing."""
    target = root
    for part in ref_parts(ref):
        if isinstance(target, dict) and part in target:
            target = target[part]
        elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
            target = target[int(part)]
        else:
            raise LookupError(f"$ref {ref!r} points to nothing")
    return target
