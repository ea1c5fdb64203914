"""Presented tool names: what the model sees instead of the canonical ``<service>.<tool>``.

A presented name matches ``^[a-zA-Z0-9_-]{1,64}$`` (OpenAI's rule, the strictest). It is
``<service>_<tool>`` with other characters replaced by ``_``; when that is too long, or when
two granted tools would share it, each affected tool gets a shortened form ending in a hash of
its canonical name. Names depend only on the agent's set of canonical names, never on order,
and agent.json maps every presented name back to its canonical name.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable

from ..errors import CompileError

MAX_LENGTH = 64
_INVALID = re.compile(r"[^a-zA-Z0-9_-]")


def canonical_name(service: str, tool: str) -> str:
    return f"{service}.{tool}"


def base_name(canonical: str) -> str:
    service, _, tool = canonical.partition(".")
    return _INVALID.sub("_", f"{service}_{tool}")


def hashed_name(canonical: str, digits: int = 8) -> str:
    suffix = hashlib.sha256(canonical.encode()).hexdigest()[:digits]
    return f"{base_name(canonical)[: MAX_LENGTH - digits - 1]}_{suffix}"


def present(canonicals: Iterable[str]) -> dict[str, str]:
    """Canonical -> presented name for one agent's tools (unique, valid, deterministic)."""
    canonicals = sorted(set(canonicals))
    groups: dict[str, list[str]] = defaultdict(list)
    for canonical in canonicals:
        groups[base_name(canonical)].append(canonical)
    plain = {
        group[0]: base
        for base, group in groups.items()
        if len(group) == 1 and len(base) <= MAX_LENGTH
    }
    for digits in (8, 12, 16, 24):
        names = dict(plain)
        for canonical in canonicals:
            if canonical not in plain:
                names[canonical] = hashed_name(canonical, digits)
        if len(set(names.values())) == len(names):
            return names
    raise CompileError(f"cannot find unique presented names for tools: {', '.join(canonicals)}")
