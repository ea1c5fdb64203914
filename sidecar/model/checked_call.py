"""A tool call whose arguments passed its tool's input schema: what the one argument check
(``execution/arguments.py``) makes, and what the engine, the gate and the executor read
without checking again (issue 23: each mediated call was checked three times)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..manifest import Effect, ManagedTool
from .canonical import digest


@dataclass(frozen=True, slots=True)
class CheckedCall:
    tool: ManagedTool
    arguments: dict[str, Any]
    """Parsed and checked against ``tool.input_schema``; read-only from here on."""
    canonical: bytes
    """Canonical JSON of ``arguments``: the key of duplicates, approvals and Idempotency-Key."""
    effect: Effect
    """``tool.effect``: what running it does (the build's, decided by clawc)."""
    call_id: str = ""
    """The model's call id (mediated) or the JSON-RPC id (MCP)."""

    @property
    def args_digest(self) -> str:
        """What an approval names the arguments by (SPEC §9.3)."""
        return digest(self.canonical.decode())
